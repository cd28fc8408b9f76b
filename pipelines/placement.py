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

    """

    accelerator_type: str = ""
    accelerator_count: int = 0
    tpu_topology: str = ""
    shm_size: str = "8Gi"
    cpu_limit: str = ""
    memory_limit: str = ""

    def __post_init__(self) -> None:
        if self.accelerator_count < 0:
            raise ValueError("--accelerator-count must be >= 0")
        if self.accelerator_count and not self.accelerator_type:
            raise ValueError("--accelerator-count needs --accelerator-type")

    @property
    def is_tpu(self) -> bool:
        """Whether the accelerator is a TPU slice."""
        return bool(self.tpu_topology) or self.accelerator_type.startswith("tpu")

    def apply(self, task: Any) -> Any:
        """Set resources, selectors, tolerations and the shm volume on a kfp task."""
        from kfp import kubernetes

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
        count = max(1, self.accelerator_count)
        if self.is_tpu:
            kubernetes.add_node_selector(
                task, "cloud.google.com/gke-tpu-accelerator", self.accelerator_type
            )
            if self.tpu_topology:
                kubernetes.add_node_selector(
                    task, "cloud.google.com/gke-tpu-topology", self.tpu_topology
                )
            task.set_accelerator_type(TPU_RESOURCE).set_accelerator_limit(count)
            kubernetes.add_toleration(
                task, key=TPU_RESOURCE, operator="Exists", effect="NoSchedule"
            )
        else:
            kubernetes.add_node_selector(
                task, "cloud.google.com/gke-accelerator", self.accelerator_type
            )
            task.set_accelerator_type(GPU_RESOURCE).set_accelerator_limit(count)
            kubernetes.add_toleration(
                task, key=GPU_RESOURCE, operator="Exists", effect="NoSchedule"
            )
        return task
