"""Where the trainer runs on Kubernetes: accelerators, node selectors, tolerations, ``/dev/shm``.

Placement is chosen when the pipeline is compiled (``tfrecord-suite compile --accelerator-type
nvidia-l4 --accelerator-count 2``), because Kubernetes resource requests cannot be switched on and
off by a run parameter without conditional branches that ``kfp.local`` cannot run. The default
places nothing special, which is what local runs use.
"""

from __future__ import annotations

import dataclasses
from typing import Any

GPU_RESOURCE = "nvidia.com/gpu"
TPU_RESOURCE = "google.com/tpu"


@dataclasses.dataclass(frozen=True)
class Placement:
    """Kubernetes placement of the train step.

    Attributes:
        accelerator_type: GKE accelerator, e.g. ``nvidia-l4``, ``nvidia-tesla-a100``, or a TPU
            type such as ``tpu-v5-lite-podslice``; empty for CPU only.
        accelerator_count: GPUs (or TPU chips) per trainer pod.
        tpu_topology: TPU slice topology, e.g. ``2x4``; makes the accelerator a TPU.
        shm_size: Size of the in-memory ``/dev/shm`` volume of the trainer.
        cpu_limit: CPU limit of the trainer (Kubernetes quantity), empty for none.
        memory_limit: Memory limit of the trainer, empty for none.
        tfjob: Always train through a TFJob (even with one worker): the train step's own pod
            stays a small launcher and the accelerators go to the TFJob's replicas. Without it,
            one worker trains in the step's pod and more launch a TFJob (the step's pod then
            holds its accelerators idle while it waits).

    """

    accelerator_type: str = ""
    accelerator_count: int = 0
    tpu_topology: str = ""
    shm_size: str = "8Gi"
    cpu_limit: str = ""
    memory_limit: str = ""
    tfjob: bool = False

    def __post_init__(self) -> None:
        if self.accelerator_count < 0:
            raise ValueError("--accelerator-count must be >= 0")
        if self.accelerator_count and not self.accelerator_type:
            raise ValueError("--accelerator-count needs --accelerator-type")

    @property
    def is_tpu(self) -> bool:
        """Whether the accelerator is a TPU slice."""
        return bool(self.tpu_topology) or self.accelerator_type.startswith("tpu")

    @property
    def accelerator_resource(self) -> str:
        """The extended resource name of the accelerator (empty without one)."""
        if not self.accelerator_type:
            return ""
        return TPU_RESOURCE if self.is_tpu else GPU_RESOURCE

    def node_selector(self) -> dict[str, str]:
        """GKE node labels that pick the accelerator's node pool."""
        if not self.accelerator_type:
            return {}
        if self.is_tpu:
            out = {"cloud.google.com/gke-tpu-accelerator": self.accelerator_type}
            if self.tpu_topology:
                out["cloud.google.com/gke-tpu-topology"] = self.tpu_topology
            return out
        return {"cloud.google.com/gke-accelerator": self.accelerator_type}

    def tolerations(self) -> list[dict[str, str]]:
        """Tolerations for the taint GKE puts on accelerator node pools."""
        if not self.accelerator_type:
            return []
        return [{"key": self.accelerator_resource, "operator": "Exists", "effect": "NoSchedule"}]

    def limits(self) -> dict[str, str]:
        """Container resource limits as Kubernetes quantities."""
        out = {}
        if self.cpu_limit:
            out["cpu"] = self.cpu_limit
        if self.memory_limit:
            out["memory"] = self.memory_limit
        if self.accelerator_type:
            out[self.accelerator_resource] = str(max(1, self.accelerator_count))
        return out

    def to_json(self) -> str:
        """The placement as JSON (baked into the compiled pipeline for the TFJob launcher)."""
        import json

        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Placement:
        """Inverse of :meth:`to_json`; ``""`` gives the default placement."""
        import json

        return cls(**json.loads(text)) if text else cls()

    def apply(self, task: Any) -> Any:
        """Set resources, selectors, tolerations and the shm volume on a kfp task.

        With ``tfjob`` the task is only a launcher: it gets none of it.
        """
        from kfp import kubernetes

        if self.tfjob:
            return task

        kubernetes.empty_dir_mount(
            task,
            volume_name="dshm",
            mount_path="/dev/shm",
            medium="Memory",
            size_limit=self.shm_size,
        )
        if self.cpu_limit:
            task.set_cpu_limit(self.cpu_limit)
        if self.memory_limit:
            task.set_memory_limit(self.memory_limit)
        if not self.accelerator_type:
            return task
        for key, value in self.node_selector().items():
            kubernetes.add_node_selector(task, key, value)
        task.set_accelerator_type(self.accelerator_resource)
        task.set_accelerator_limit(max(1, self.accelerator_count))
        for toleration in self.tolerations():
            kubernetes.add_toleration(task, **toleration)
        return task
