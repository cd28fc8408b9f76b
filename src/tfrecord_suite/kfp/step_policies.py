"""How Kubeflow runs each component of the suite in a pipeline: the one table of step policies.

Every ready pipeline (``pipelines/``) places its tasks through :class:`Steps`, and a user's own
pipeline can give a task of ours the same settings with
:func:`tfrecord_suite.components.configure`: display name, retries, whether Kubeflow may cache
it, the pod facts it reads through the downward API (:mod:`tfrecord_suite.podinfo`), CPU and
memory requests, the image it records, the Secrets it gets, and for the train step its placement
and the trainer labels.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tfrecord_suite import podinfo
from tfrecord_suite.images import IMAGE_UID
from tfrecord_suite.kfp.components import Components, build_components
from tfrecord_suite.kfp.task_placement import Deployment, apply_placement
from tfrecord_suite.launch.kube import TRAINER_LABELS
from tfrecord_suite.launch.placement import Placement


@dataclasses.dataclass(frozen=True)
class StepPolicy:
    """How Kubeflow runs one step of the pipeline.

    Attributes:
        display_name: The step's name in the Kubeflow UI.
        retries: Retries of a failed step (its own failures on bad input are final, see
            :class:`tfrecord_suite.errors.RetryWillNotHelp`); 0 for none.
        backoff: Wait before the first retry, doubled for each next one.
        cache: Whether Kubeflow may reuse an earlier run's result.
        pod_info: Whether the step's pod is told its run, name, UID and service account
            (:mod:`tfrecord_suite.podinfo`, through the downward API: not inputs, so they stay
            out of the cache key).

    """

    display_name: str
    retries: int = 0
    backoff: str = "10s"
    cache: bool = True
    pod_info: bool = False


#: Every step's policy, and why where it is not the default.
STEPS = {
    # the input may have changed under the same URI: always look
    "fingerprint": StepPolicy("Fingerprint input", cache=False),
    # the run names its staging folder
    "shard": StepPolicy("Shard to TFRecords (Beam)", retries=2, backoff="30s", pod_info=True),
    # publishing is idempotent, but a cached result could name a version gc'ed since; the run
    # goes into the manifest's producer
    "version": StepPolicy("Publish dataset version", retries=3, cache=False, pod_info=True),
    # an alias (stable, latest) moves: always look
    "resolve_dataset": StepPolicy("Resolve dataset version", retries=3, cache=False),
    # a distributed job is named after the run, owned by the step's pod, runs as its account
    "train": StepPolicy("Train (tf.distribute)", pod_info=True),
    "evaluate": StepPolicy("Evaluate against the stable model", retries=2),
    # a cached result would skip registering this run; a retry finds its run's registration
    "register": StepPolicy("Register model", retries=3, cache=False, pod_info=True),
    "promote": StepPolicy("Promote model", cache=False),
    "report": StepPolicy("Report"),
}


def configure(
    task: Any,
    name: str,
    placement: Placement | None = None,
    deployment: Deployment | None = None,
) -> Any:
    """Give the task of component ``name`` the settings the ready pipelines give it.

    Display name, retries, caching (off where :data:`STEPS` says, or everywhere without
    ``deployment.caching``), the downward-API variables of :mod:`tfrecord_suite.podinfo`, CPU and
    memory requests and the image it records (``deployment``), the images' non-root user (so the
    step's pod is admitted where Pod Security ``restricted`` is enforced), and for ``train`` the
    placement (accelerators, selectors, tolerations, ``/dev/shm``). Without ``deployment``, the
    images are the set the task's own image belongs to (``build(R, T)``'s), so what the step
    records and the pods it launches use the registry and tag the component was built for.
    """
    from kfp import kubernetes

    placement = placement or Placement()
    deployment = deployment or Deployment.of_image(
        task.component_spec.implementation.container.image
    )
    policy = STEPS[name]
    task.set_display_name(policy.display_name)
    if policy.retries:
        task.set_retry(num_retries=policy.retries, backoff_duration=policy.backoff,
                       backoff_factor=2)  # fmt: skip
    if not (policy.cache and deployment.caching):
        task.set_caching_options(False)
    # Kubeflow's executor pods declare no user of their own: without these a profile namespace
    # that enforces Pod Security `restricted` refuses them (runAsNonRoot unset)
    kubernetes.set_security_context(task, run_as_user=IMAGE_UID, run_as_non_root=True)
    if policy.pod_info:
        for env, field_path in podinfo.FIELDS.items():
            kubernetes.use_field_path_as_env(task, env, field_path)
    deployment.apply(name, task, placement)
    if name == "train":
        apply_placement(placement, task)
        # a tf.data service's NetworkPolicy admits trainer pods (launch/data_service.py)
        for key, value in TRAINER_LABELS.items():
            kubernetes.add_pod_label(task, key, value)
    return task


class Steps:
    """The suite's components for one compiled pipeline, each task configured on creation.

    ``steps("shard", input_uri=...)`` adds a shard task and configures it (:func:`configure`);
    the train step runs the image its placement needs.
    """

    def __init__(self, placement: Placement | None = None, deployment: Deployment | None = None):
        self.placement = placement or Placement()
        self.deployment = deployment or Deployment()
        images = self.deployment.images
        self.components: Components = build_components(
            images, train_image=self.placement.step_image(images)
        )

    @property
    def trainer_image(self) -> str:
        """The image a distributed job's nodes run (the accelerator build of the placement)."""
        return self.placement.trainer_image(self.deployment.images)

    def __call__(self, name: str, **inputs: Any) -> Any:
        """A configured task of component ``name`` on ``inputs``."""
        task = self.components[name](**inputs)
        return configure(task, name, self.placement, self.deployment)
