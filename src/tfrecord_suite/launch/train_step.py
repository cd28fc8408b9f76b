"""What the train step creates on Kubernetes for its run: a lease, its tf.data service, its job.

The kfp train step (:func:`tfrecord_suite.steps.training.train_step`) trains in its own pod unless
it runs more than one node, or its placement says ``launch_job``, or its input service is
``cluster:N``. Then, in this order and each inside the one before:

1. :func:`launching`: the Kubernetes API and the step's lease
   (:mod:`~tfrecord_suite.launch.lease`), named after the run and owned by the step's pod, which
   owns everything after it (a failed job kept for inspection included);
2. :func:`cluster_input_service`: the run's tf.data service
   (:mod:`~tfrecord_suite.launch.data_service_k8s`), when the input service is ``cluster:N``;
3. :func:`train_in_job`: a TrainJob or TFJob (:mod:`~tfrecord_suite.launch.job`) whose nodes run
   ``tfrecord-suite train`` with the step's configuration, its chief writing under the registry.

Everything is named after the pipeline run, so a retried step adopts what its earlier attempt
made; everything runs as the step's service account with the step's Secrets
(:mod:`~tfrecord_suite.launch.credentials`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Iterator
from typing import Any

from tfrecord_suite import flags
from tfrecord_suite.io import storage
from tfrecord_suite.launch.credentials import Credentials
from tfrecord_suite.launch.job import JobKind
from tfrecord_suite.launch.lease import Lease
from tfrecord_suite.launch.placement import Placement
from tfrecord_suite.podinfo import PodInfo
from tfrecord_suite.train.served import SERVED_DIR, ShareOptions

_LOG = logging.getLogger(__name__)
#: Where a job's nodes train when the registry's store is one TensorFlow cannot write
#: (``s3://``): a folder of the node's own (TrainConfig.publish_to copies the outputs out)
NODE_MODEL_DIR = "/tmp/tfrecord-suite-model"


@dataclasses.dataclass
class StepLaunch:
    """What the train step creates on Kubernetes with: the API, the run, its lease, its Secrets.

    Attributes:
        api: The Kubernetes ``ApiClient``.
        run_key: Names the run's objects (the pipeline run's id, or the model artifact's URI).
        pod: The step's own pod.
        lease: The lease every object created names as owner (None until it is acquired).
        credentials: The Secrets every pod created gets.
        kinds: The job kinds to try, in order (empty: training runs in the step's pod).
        service_workers: Worker pods of the run's tf.data service (0: none).
        image: The image of the run's tf.data service (and of the lease's template).
        service_requests: CPU and memory each service worker requests instead of the
            defaults (:meth:`Placement.service_requests`).
        stage: What each service worker stages before it serves, where the shards are on a
            store TensorFlow cannot open (``s3://``; :mod:`~tfrecord_suite.train.served`);
            None: nothing.

    """

    api: Any
    run_key: str
    pod: PodInfo
    lease: Lease | None
    credentials: Credentials
    kinds: list[JobKind]
    service_workers: int
    image: str
    service_requests: dict[str, str] = dataclasses.field(default_factory=dict)
    stage: ShareOptions | None = None

    def owner(self) -> dict[str, str] | None:
        """The ``ownerReference`` of what the step creates."""
        return self.lease.owner_reference() if self.lease else self.pod.owner_reference()

    def trainers(self) -> list[dict[str, str]]:
        """Label selectors of this run's trainers: its job's nodes, and the step's own pod."""
        from tfrecord_suite.launch.kube import run_trainers

        return run_trainers(self.run_key, self.pod.run_id)


@contextlib.contextmanager
def launching(
    config: Any, workers: int, where: Placement, fallback_key: str, image: str
) -> Iterator[StepLaunch | None]:
    """The API and a lease when the step creates objects; None when it trains in its own pod.

    Everything that can be refused before an object exists is checked first: the input
    service's specification, enough training files for its workers, a Kubernetes API and a job
    API. The lease is named after the run (``fallback_key`` where the pod does not know its
    run), owned by the step's pod, renewed while this block runs and deleted after it; a
    retried step adopts a live one.

    Args:
        config: The step's ``TrainConfig``.
        workers: Nodes to train on.
        where: The step's placement (``launch_job``, the job API asked for).
        fallback_key: Names the run's objects where the pod does not know its run.
        image: The image of the run's tf.data service and of the lease's template.

    Raises:
        UserError: Bad input (a ``ValueError``): an input service it cannot start, too few
            files for its workers, no Kubernetes or job API; nothing was created.

    """
    from tfrecord_suite.launch.discovery import choose_launchers
    from tfrecord_suite.launch.job import job_name, kubernetes_client
    from tfrecord_suite.launch.lease import lease_name
    from tfrecord_suite.train.service import InputService

    wanted = InputService.parse(config.input_service)
    job = workers > 1 or where.launch_job
    service = wanted.cluster_workers if wanted else 0
    if not (job or service):
        yield None
        return
    stage = None
    if service:
        from tfrecord_suite.registry.datasets import resolve_dataset, shard_uris
        from tfrecord_suite.train.service import check_files_per_worker

        manifest, version_dir = resolve_dataset(config.dataset)
        train_files = shard_uris(manifest, version_dir, "train")
        check_files_per_worker(wanted, len(train_files), workers)
        if config.reader.stages(train_files):  # s3://: each worker stages its share first
            stage = ShareOptions(stage_dataset=version_dir, stage_pipelines=workers)
    pod = PodInfo.from_env()
    run_key = pod.run_id or fallback_key
    api = kubernetes_client()
    kinds = choose_launchers(where.launcher, api) if job else []
    launch = StepLaunch(
        api, run_key, pod, None, Credentials.from_env(), kinds, service, image,
        where.service_requests(), stage,
    )  # fmt: skip
    lease = Lease(
        api,
        lease_name(job_name(run_key)),
        image,
        run_id=run_key,
        owner=pod.owner_reference(),
    )
    with lease:
        launch.lease = lease
        yield launch


@contextlib.contextmanager
def cluster_input_service(config: Any, launch: StepLaunch | None) -> Iterator[Any]:
    """``config``, its ``cluster:N`` input service started as pods and named by its address.

    The service is named after the run, so a retried step adopts its own; it runs as the
    step's account, owned by the step's lease, with the step's Secrets, answers this run's
    trainers only (:meth:`StepLaunch.trainers`), and is deleted on leaving. Where its workers
    stage their shares first (``launch.stage``), the config names their copies.
    """
    if launch is None or not launch.service_workers:
        yield config
        return
    from tfrecord_suite.launch.data_service_k8s import DataServiceLauncher
    from tfrecord_suite.launch.job import job_name

    with DataServiceLauncher(launch.api).running(
        f"{job_name(launch.run_key)}-data",
        launch.service_workers,
        launch.image,
        run_id=launch.run_key,
        service_account=launch.pod.service_account,
        owner=launch.owner(),
        credentials=launch.credentials,
        clients=launch.trainers(),
        worker_requests=launch.service_requests,
        stage=launch.stage,
    ) as address:
        _LOG.info("training input through the run's tf.data service at %s", address)
        if launch.stage is not None:
            reader = dataclasses.replace(config.reader, served_copies=SERVED_DIR)
            config = dataclasses.replace(config, reader=reader)
        yield dataclasses.replace(config, input_service=address)


def train_in_job(
    config: Any,
    workers: int,
    where: Placement,
    launch: StepLaunch,
    trainer_image: str,
    keep_failed: bool,
) -> Any:
    """Train in a TrainJob or TFJob whose chief writes under the registry; return its metrics.

    The job is named after the pipeline run, so a retried step adopts its own job; it runs
    ``tfrecord-suite train`` with ``config`` (:func:`tfrecord_suite.flags.to_args`) on
    ``trainer_image``, as the step's own service account with the step's Secrets, owned by the
    step's lease. Each job kind of ``launch.kinds`` is tried in turn while the API server
    refuses the object itself.

    With ``keep_failed`` a failed job stays for inspection, bounded like everything the step
    creates: the lease is kept (:meth:`~tfrecord_suite.launch.lease.Lease.keep`) for
    :data:`~tfrecord_suite.launch.job.FINISHED_TTL_SECONDS` past the failure, then ends and takes
    the job with it (sooner with the step's pod). A killed launcher's job, failed or not, goes
    with the unrenewed lease within minutes.

    Returns:
        The run's ``TrainMetrics``, as the chief wrote them.

    """
    from tfrecord_suite.launch.job import (
        FINISHED_TTL_SECONDS,
        JobConfig,
        JobLauncher,
        JobRejected,
        job_name,
    )
    from tfrecord_suite.launch.kube import JobError
    from tfrecord_suite.registry.refs import DatasetRef
    from tfrecord_suite.train.metrics import TrainMetrics
    from tfrecord_suite.train.staging import tensorflow_reads

    name = job_name(launch.run_key)
    shared = storage.join(DatasetRef.parse(config.dataset).root, "_runs", name, "model")
    if tensorflow_reads(shared):
        config = dataclasses.replace(config, model_dir=shared)
    else:
        # TensorFlow cannot write there (s3://): the nodes train into a folder of their own
        # and the chief copies the model's outputs there when done; a node restarted mid-run
        # then starts its epochs over (its backups were its own)
        config = dataclasses.replace(config, model_dir=NODE_MODEL_DIR, publish_to=shared)
    config.validate()
    if config.strategy == "auto" and workers > 1:
        config.strategy = "multi_worker"
    kinds = launch.kinds
    job = JobConfig(
        name=name,
        image=trainer_image,
        trainer_args=flags.to_args(config),
        workers=workers,
        placement=where,
        run_id=launch.run_key,
        service_account=launch.pod.service_account,
        owner=launch.owner(),
        credentials=launch.credentials,
        keep_on_failure=keep_failed,
    )
    for kind, fallback in zip(kinds, [*kinds[1:], None], strict=True):
        launcher = JobLauncher(kind, launch.api)
        try:
            launcher.run(job)
            break
        except JobRejected as exc:
            if fallback is None:
                raise
            _LOG.warning("%s; launching a %s instead", exc, fallback.kind)
        except JobError:
            if launcher.kept and launch.lease is not None:
                launch.lease.keep(FINISHED_TTL_SECONDS)
            raise
    # the chief's metrics, where the step reads the model from
    return dataclasses.replace(TrainMetrics.load(shared), model_dir=shared)
