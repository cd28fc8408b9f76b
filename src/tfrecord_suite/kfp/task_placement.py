"""Placement and deployment applied to the kfp tasks: resources, selectors, images, requests.

The placement itself (:class:`~tfrecord_suite.launch.placement.Placement`) is kfp-free, because
the job launcher applies it to a distributed job's nodes too; this module applies it to a task.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tfrecord_suite.errors import UserError
from tfrecord_suite.images import DEFAULT_REGISTRY, DEFAULT_TAG, IMAGE_ENV, ImageSet
from tfrecord_suite.launch.credentials import (
    CREDENTIALS_ENV,
    S3_OPTIONAL_KEYS,
    S3_REQUIRED_KEYS,
    Credentials,
)
from tfrecord_suite.launch.placement import Placement, is_quantity


def apply_placement(placement: Placement, task: Any) -> Any:
    """Set resources, selectors, tolerations and the shm volume on the train step's kfp task.

    With ``launch_job`` the task is only a launcher: it gets none of it (the job's nodes do).
    """
    from kfp import kubernetes

    if placement.launch_job:
        return task

    kubernetes.empty_dir_mount(
        task,
        volume_name="dshm",
        mount_path="/dev/shm",
        medium="Memory",
        size_limit=placement.shm_size,
    )
    if placement.cpu_limit:
        task.set_cpu_limit(placement.cpu_limit)
    if placement.memory_limit:
        task.set_memory_limit(placement.memory_limit)
    if not placement.accelerator_type:
        return task
    for key, value in placement.node_selector().items():
        kubernetes.add_node_selector(task, key, value)
    task.set_accelerator_type(placement.accelerator_resource)
    task.set_accelerator_limit(max(1, placement.accelerator_count))
    for toleration in placement.tolerations():
        kubernetes.add_toleration(task, **toleration)
    return task


def apply_credentials(credentials: Credentials, task: Any) -> Any:
    """Give a kfp task the storage Secret and the image pull Secrets ``credentials`` name.

    The same shape as the pods the train step creates get (:class:`Credentials`): a ``gcs-key``
    Secret mounted read-only with ``GOOGLE_APPLICATION_CREDENTIALS`` pointing at its key file,
    or an ``s3-keys`` Secret's keys as environment variables (the endpoint and region optional).
    Secret names are compiled in as strings, which every KFP 2.x driver reads.
    """
    from kfp import kubernetes

    from tfrecord_suite.launch.credentials import STORAGE_MOUNT

    secret = credentials.storage_secret
    if secret and credentials.storage_secret_type == "gcs-key":
        kubernetes.use_secret_as_volume(task, secret_name=secret, mount_path=STORAGE_MOUNT)
        task.set_env_variable("GOOGLE_APPLICATION_CREDENTIALS", credentials.key_file)
    elif secret:
        kubernetes.use_secret_as_env(task, secret, {k: k for k in S3_REQUIRED_KEYS})
        kubernetes.use_secret_as_env(task, secret, {k: k for k in S3_OPTIONAL_KEYS}, optional=True)
    if credentials.pull_secret_names():
        kubernetes.set_image_pull_secrets(task, credentials.pull_secret_names())
    return task


#: CPU and memory each step requests by default (Kubernetes quantities). The shard step runs
#: Beam's DirectRunner inside its pod when no remote runner is given; evaluation loads two
#: SavedModels; the train step's request follows its placement (:func:`train_request`). Each
#: fits a common 4 vCPU / 16 GB node (tests/integration/test_k8s_apiserver.py); --step-resources
#: asks for more where nodes are larger.
STEP_REQUESTS: dict[str, tuple[str, str]] = {
    "fingerprint": ("500m", "512Mi"),
    "shard": ("3", "8Gi"),
    "version": ("1", "2Gi"),
    "resolve_dataset": ("250m", "512Mi"),
    "evaluate": ("2", "8Gi"),
    "register": ("1", "2Gi"),
    "promote": ("250m", "256Mi"),
    "report": ("250m", "256Mi"),
}
STEPS = (*STEP_REQUESTS, "train")


def train_request(placement: Placement) -> tuple[str, str]:
    """CPU and memory for the train step's pod: a trainer's, or a small launcher's."""
    if placement.launch_job:
        return ("500m", "1Gi")  # a launcher that waits on the job
    requests = placement.requests()
    return requests["cpu"], requests["memory"]


def parse_step_resources(text: str) -> dict[str, tuple[str, str]]:
    """``"shard=8/32Gi,train=16/64Gi"`` -> ``{"shard": ("8", "32Gi"), ...}``.

    Raises:
        UserError: An unknown step, or a pair not written ``step=CPU/MEMORY``.

    """
    out: dict[str, tuple[str, str]] = {}
    for pair in filter(None, (p.strip() for p in text.split(","))):
        step, sep, value = pair.partition("=")
        cpu, slash, memory = value.partition("/")
        if not sep or not slash or not is_quantity(cpu) or not is_quantity(memory):
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
            distributed-job nodes comes from there.
        image_tag: Tag of those images.
        image_digests: Digests pinning some of those images, as IMAGE=DIGEST pairs separated by
            commas (IMAGE: component, trainer-gpu, trainer-tpu or beam-worker), e.g.
            component=sha256:...: a pinned image is named NAME:TAG@DIGEST in the compiled
            pipeline and in every pod the train step creates, and the container runtime pulls
            it by the digest (k8s/images' digest: fields; retrain --image carries its own).
        step_resources: CPU/memory requests overriding the defaults, as step=CPU/MEMORY pairs
            separated by commas, e.g. shard=8/32Gi,train=16/64Gi.
        caching: Let Kubeflow reuse an earlier run's result of the steps that allow it (shard
            and train on the same data and parameters); --no-caching runs every step.
        credentials: The storage and image pull Secrets every step gets, and every pod the
            train step creates (flat flags: --storage-secret, --storage-secret-type,
            --image-pull-secrets).

    """

    image_registry: str = DEFAULT_REGISTRY
    image_tag: str = DEFAULT_TAG
    image_digests: str = ""
    step_resources: str = ""
    caching: bool = True
    credentials: Credentials = dataclasses.field(default_factory=Credentials)

    def __post_init__(self) -> None:
        self.images  # noqa: B018 - validates the registry and tag now, with a clear message
        parse_step_resources(self.step_resources)

    @classmethod
    def of_image(cls, image: str) -> Deployment:
        """The default deployment on the image set ``image`` belongs to.

        The defaults' where it is none of the suite's (a user's own image).
        """
        found = ImageSet.find(image)
        return cls(found.registry, found.tag, found.digests_text) if found else cls()

    @property
    def images(self) -> ImageSet:
        """The image set this deployment names."""
        return ImageSet(
            self.image_registry, self.image_tag, ImageSet.parse_digests(self.image_digests)
        )

    def requests(self, step: str, placement: Placement) -> tuple[str, str]:
        """CPU and memory requested by ``step``."""
        override = parse_step_resources(self.step_resources)
        if step in override:
            return override[step]
        return train_request(placement) if step == "train" else STEP_REQUESTS[step]

    def apply(self, step: str, task: Any, placement: Placement) -> Any:
        """Set ``step``'s CPU and memory, its image and its Secrets on its kfp task.

        The image goes into the container's environment (``TFRECORD_SUITE_IMAGE``), so the
        manifests a step writes name the image that really produced them.
        """
        cpu, memory = self.requests(step, placement)
        image = placement.step_image(self.images) if step == "train" else self.images.component
        task.set_env_variable(IMAGE_ENV, image)
        apply_credentials(self.credentials, task)
        if step == "train" and self.credentials:
            # the train step hands them on to the pods it creates (launch/credentials.py)
            task.set_env_variable(CREDENTIALS_ENV, self.credentials.to_json())
        return task.set_cpu_request(cpu).set_memory_request(memory)
