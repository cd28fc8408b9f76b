"""Where the trainer runs on Kubernetes: accelerators, node selectors, tolerations, ``/dev/shm``.

Placement is chosen when the pipeline is compiled (``tfrecord-suite compile --accelerator-type
nvidia-l4 --accelerator-count 2``), because Kubernetes resource requests cannot be switched on and
off by a run parameter without conditional branches that ``kfp.local`` cannot run. The default
places nothing special, which is what local runs use. The same placement applies to the train
step's pod (``tfrecord_suite.kfp.task_placement.apply_placement``) or to the nodes of the
distributed job it launches (``tfjob``, ``trainjob``).
"""

from __future__ import annotations

import dataclasses
import re

from tfrecord_suite import flags
from tfrecord_suite.errors import UserError
from tfrecord_suite.images import GPU_RESOURCE, TPU_RESOURCE, ImageSet

#: Values of ``--launcher``.
LAUNCHERS = ("auto", "trainjob", "tfjob")

#: CPU cores and GiB of memory a trainer requests per GPU. Chosen to fit the smallest common
#: one-GPU machines after the kubelet's reservations and the node's daemon sets (GKE g2-standard-4
#: and n1-standard-4 + T4 leave ~3.9 CPU and ~12 GiB allocatable; AWS g4dn.xlarge and Azure
#: NC4as_T4_v3 are larger); ``tests/unit/test_pipeline.py`` checks them against those machines.
PER_GPU_REQUEST = (2, 8)
#: What a trainer on a TPU host requests (TPU hosts have tens of cores and hundreds of GiB).
TPU_HOST_REQUEST = ("8", "32Gi")
#: What a CPU-only trainer requests: it fits a 4 vCPU / 16 GB node (:data:`SMALL_NODE`).
CPU_TRAINER_REQUEST = ("3", "10Gi")
#: What a 4 vCPU / 16 GB node (GKE e2-standard-4, EKS m5.xlarge) leaves for pods after the
#: kubelet's reservations and the usual daemon sets: the defaults of every pod the suite
#: creates fit in it (a request or limit above it would stay Pending on such a node).
SMALL_NODE = {"cpu": "3500m", "memory": "12Gi"}


#: A CPU or memory quantity as Kubernetes writes one: 3, 1.5, 500m, 512Mi, 8Gi
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")
#: Placement's fields that hold one (checked when a placement is made)
_QUANTITY_FIELDS = ("cpu_limit", "memory_limit", "cpu_request", "memory_request",
                    "service_cpu_request", "service_memory_request")  # fmt: skip


def is_quantity(text: str) -> bool:
    """Whether ``text`` is a CPU or memory quantity (``3``, ``500m``, ``8Gi``)."""
    return bool(_QUANTITY.match(text))


def fits_small_node(quantities: dict[str, str]) -> bool:
    """Whether CPU and memory ``quantities`` (Kubernetes quantities) fit :data:`SMALL_NODE`."""
    from kubernetes.utils.quantity import parse_quantity

    return all(
        parse_quantity(quantities[key]) <= parse_quantity(SMALL_NODE[key])
        for key in SMALL_NODE
        if key in quantities
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
        cpu_request: CPU the trainer requests (each node of a job, or the step's pod), e.g.
            1500m for nodes smaller than the default asks; empty: the default for the
            accelerator (3 for a CPU trainer).
        memory_request: Memory the trainer requests, e.g. 6Gi; empty: the default (10Gi for a
            CPU trainer).
        launch_job: Always train in a separate distributed job (a TrainJob or TFJob, as
            ``launcher`` picks), even with one worker: the train step's own pod stays a small
            launcher and the accelerators go to the job's nodes. Without it, one worker trains
            in the step's pod and more launch a job (the step's pod then holds its accelerators
            idle while it waits).
        launcher: How multi-node training is launched: ``trainjob`` (Kubeflow Trainer v2),
            ``tfjob`` (Training Operator v1), or ``auto`` (asks the cluster which it serves,
            TrainJob first). The compiled pipeline's default for its ``launcher`` parameter.
        service_cpu_request: CPU each worker of the run's tf.data service requests
            (``input_service=cluster:N``), e.g. 1500m for nodes smaller than the default asks;
            empty: the default (3, a 4 vCPU node's share).
        service_memory_request: Memory each worker of the run's tf.data service requests,
            e.g. 4Gi; empty: the default (8Gi).
        priority_class: PriorityClass of a TFJob's nodes, e.g. tfrecord-suite-gpu-training
            (k8s/cluster installs it; it preempts nobody unless the administrator applied
            k8s/priority); empty for the cluster's default. A TrainJob's nodes take the
            runtime's (k8s/priority sets it there); the train step's own pod cannot take one
            (kfp-kubernetes has no setting for it).

    """

    accelerator_type: str = ""
    accelerator_count: int = 0
    tpu_topology: str = ""
    shm_size: str = "8Gi"
    cpu_limit: str = ""
    memory_limit: str = ""
    cpu_request: str = ""
    memory_request: str = ""
    launch_job: bool = dataclasses.field(default=False, metadata={flags.ALIASES: ("--tfjob",)})
    launcher: str = "auto"
    service_cpu_request: str = ""
    service_memory_request: str = ""
    priority_class: str = ""

    def __post_init__(self) -> None:
        for name in _QUANTITY_FIELDS:
            value = getattr(self, name)
            if value and not is_quantity(value):
                flag = "--" + name.replace("_", "-")
                raise UserError(f"{flag} {value!r}: write a quantity, e.g. 1500m or 6Gi")
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
        if self.launcher not in LAUNCHERS:
            raise UserError(f"--launcher {self.launcher!r}: use one of {', '.join(LAUNCHERS)}")
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

    def requests(self) -> dict[str, str]:
        """CPU and memory one trainer (the step's pod, or each node of a job) requests.

        Requests are what the scheduler guarantees, not a cap: with no CPU limit the input
        pipeline still uses every idle core of its node. Per GPU they stay below what common
        single-GPU machines can give a pod (:data:`PER_GPU_REQUEST`), so a one-GPU trainer is
        never left Pending for want of CPU or memory. ``cpu_request`` and ``memory_request``
        replace them (a job's nodes can ask for no more than its nodes have).
        """
        if self.is_tpu:
            cpu, memory = TPU_HOST_REQUEST
        elif self.accelerator_type:
            gpus = max(1, self.accelerator_count)
            cpu, memory = (str(PER_GPU_REQUEST[0] * gpus), f"{PER_GPU_REQUEST[1] * gpus}Gi")
        else:
            cpu, memory = CPU_TRAINER_REQUEST
        return {"cpu": self.cpu_request or cpu, "memory": self.memory_request or memory}

    def service_requests(self) -> dict[str, str]:
        """What each tf.data service worker requests beyond the defaults (only those given)."""
        given = {"cpu": self.service_cpu_request, "memory": self.service_memory_request}
        return {key: value for key, value in given.items() if value}

    def resources(self) -> dict[str, dict[str, str]]:
        """A trainer container's ``resources``: :meth:`requests` and :meth:`limits`."""
        out = {"requests": self.requests()}
        if self.limits():
            out["limits"] = self.limits()
        return out

    def to_json(self) -> str:
        """The placement as JSON (baked into the compiled pipeline for the job launcher)."""
        import json

        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Placement:
        """Inverse of :meth:`to_json`; ``""`` gives the default placement."""
        import json

        fields = json.loads(text) if text else {}
        if "tfjob" in fields:  # the name before TrainJobs, in pipelines compiled then
            fields["launch_job"] = fields.pop("tfjob")
        return cls(**fields)

    def trainer_image(self, images: ImageSet) -> str:
        """The image the trainer runs in on this placement (GPU, TPU or CPU build)."""
        return images.trainer(self.accelerator_resource)

    def step_image(self, images: ImageSet) -> str:
        """The image of the train step's own pod: a job launcher needs only the CPU image."""
        return images.component if self.launch_job else self.trainer_image(images)
