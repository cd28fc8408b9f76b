"""Where the trainer runs on Kubernetes: accelerators, node selectors, tolerations, ``/dev/shm``.

Placement is chosen when the pipeline is compiled (``tfrecord-suite compile --accelerator-type
nvidia-l4 --accelerator-count 2``), because Kubernetes resource requests cannot be switched on and
off by a run parameter without conditional branches that ``kfp.local`` cannot run. The default
places nothing special, which is what local runs use.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tfrecord_suite.errors import UserError
from tfrecord_suite.images import (
    DEFAULT_REGISTRY,
    DEFAULT_TAG,
    GPU_RESOURCE,
    IMAGE_ENV,
    TPU_RESOURCE,
    ImageSet,
)


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
            raise UserError("--accelerator-count must be >= 0")
        if self.accelerator_count and not self.accelerator_type:
            raise UserError("--accelerator-count needs --accelerator-type")
        if self.tpu_topology and self.accelerator_type and not self.is_tpu_type:
            raise UserError(
                f"--accelerator-type {self.accelerator_type} is a GPU but --tpu-topology "
                f"{self.tpu_topology} asks for a TPU slice: give a TPU type (tpu-...) or drop "
                "--tpu-topology"
            )
        if self.tpu_topology and not self.accelerator_type:
            raise UserError(
                "--tpu-topology needs a TPU --accelerator-type, e.g. tpu-v5-lite-podslice"
            )

    @property
    def is_tpu_type(self) -> bool:
        """Whether the accelerator type names a TPU (GKE's TPU types start with ``tpu``)."""
        return self.accelerator_type.startswith("tpu")

    @property
    def is_tpu(self) -> bool:
        """Whether the accelerator is a TPU slice."""
        return self.is_tpu_type

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

    def trainer_image(self, images: ImageSet) -> str:
        """The image the trainer runs in on this placement (GPU, TPU or CPU build)."""
        return images.trainer(self.accelerator_resource)

    def step_image(self, images: ImageSet) -> str:
        """The image of the train step's own pod: a TFJob launcher needs only the CPU image."""
        return images.component if self.tfjob else self.trainer_image(images)

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


#: CPU and memory each step requests by default (Kubernetes quantities). The shard step runs
#: Beam's DirectRunner inside its pod when no remote runner is given; evaluation loads two
#: SavedModels; the train step's request follows its placement (:func:`train_request`).
STEP_REQUESTS: dict[str, tuple[str, str]] = {
    "fingerprint": ("500m", "512Mi"),
    "shard": ("4", "8Gi"),
    "version": ("1", "2Gi"),
    "evaluate": ("2", "8Gi"),
    "register": ("1", "2Gi"),
    "promote": ("250m", "256Mi"),
    "report": ("250m", "256Mi"),
}
STEPS = (*STEP_REQUESTS, "train")


def train_request(placement: Placement) -> tuple[str, str]:
    """CPU and memory for the train step's pod: input pipelines need cores per accelerator."""
    if placement.tfjob:
        return ("500m", "1Gi")  # a launcher that waits on the TFJob
    if placement.is_tpu:
        return ("8", "32Gi")
    if placement.accelerator_type:
        gpus = max(1, placement.accelerator_count)
        return (str(4 * gpus), f"{16 * gpus}Gi")
    return ("4", "16Gi")


def parse_step_resources(text: str) -> dict[str, tuple[str, str]]:
    """``"shard=8/32Gi,train=16/64Gi"`` -> ``{"shard": ("8", "32Gi"), ...}``.

    Raises:
        UserError: An unknown step, or a pair not written ``step=CPU/MEMORY``.

    """
    import re

    out: dict[str, tuple[str, str]] = {}
    quantity = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")
    for pair in filter(None, (p.strip() for p in text.split(","))):
        step, sep, value = pair.partition("=")
        cpu, slash, memory = value.partition("/")
        if not sep or not slash or not quantity.match(cpu) or not quantity.match(memory):
            raise UserError(f"--step-resources {pair!r}: write step=CPU/MEMORY, e.g. shard=8/32Gi")
        if step not in STEPS:
            raise UserError(f"--step-resources: no step {step!r}; steps: {', '.join(STEPS)}")
        out[step] = (cpu, memory)
    return out


@dataclasses.dataclass(frozen=True)
class Deployment:
    """Where the compiled pipeline's images come from and what each step requests.

    Attributes:
        image_registry: Registry (and path) holding the suite's images, e.g.
            europe-docker.pkg.dev/my-project/ml; every image in the compiled pipeline and in
            TFJob replicas comes from there.
        image_tag: Tag of those images.
        step_resources: CPU/memory requests overriding the defaults, as step=CPU/MEMORY pairs
            separated by commas, e.g. shard=8/32Gi,train=16/64Gi.

    """

    image_registry: str = DEFAULT_REGISTRY
    image_tag: str = DEFAULT_TAG
    step_resources: str = ""

    def __post_init__(self) -> None:
        self.images  # noqa: B018 - validates the registry and tag now, with a clear message
        parse_step_resources(self.step_resources)

    @property
    def images(self) -> ImageSet:
        """The image set this deployment names."""
        return ImageSet(self.image_registry, self.image_tag)

    def requests(self, step: str, placement: Placement) -> tuple[str, str]:
        """CPU and memory requested by ``step``."""
        override = parse_step_resources(self.step_resources)
        if step in override:
            return override[step]
        return train_request(placement) if step == "train" else STEP_REQUESTS[step]

    def apply(self, step: str, task: Any, placement: Placement) -> Any:
        """Set ``step``'s CPU and memory requests, and the image it runs in, on its kfp task.

        The image goes into the container's environment (``TFRECORD_SUITE_IMAGE``), so the
        manifests a step writes name the image that really produced them.
        """
        cpu, memory = self.requests(step, placement)
        image = placement.step_image(self.images) if step == "train" else self.images.component
        task.set_env_variable(IMAGE_ENV, image)
        return task.set_cpu_request(cpu).set_memory_request(memory)
