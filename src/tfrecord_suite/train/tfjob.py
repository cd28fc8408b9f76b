"""Multi-node training through the Kubeflow Training Operator: render, run and clean up a TFJob.

A kfp task is one pod. For ``workers > 1`` the train step becomes a launcher: it creates a
``kubeflow.org/v1`` ``TFJob`` with one chief and ``workers - 1`` worker replicas running the same
image and ``tfrecord-suite train`` arguments (the operator sets ``TF_CONFIG`` in each, and the
trainer picks ``MultiWorkerMirroredStrategy`` from it), waits for it, reports the replicas' state
and logs, deletes it, and fails with the failing replica's own error. The chief writes the model
and ``metrics.json`` into the same folder the single-pod path uses, so both return the same
artifacts.

The job name is derived from the pipeline run, so a retried kfp task adopts the job its previous
attempt created instead of starting a second one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import os
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

from tfrecord_suite.pipelines.placement import Placement

_LOG = logging.getLogger(__name__)

GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "tfjobs"
#: The Training Operator only manages the container with this name.
CONTAINER = "tensorflow"
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
RUN_LABEL = "tfrecord-suite/run"
NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
_RETRYABLE_STATUS = {0, 429, 500, 502, 503, 504}


class TFJobError(RuntimeError):
    """The TFJob could not be created, failed, or did not finish in time."""


class TFJobCancelled(TFJobError):
    """The launcher was asked to stop (the kfp task was cancelled)."""


@dataclasses.dataclass
class TFJobConfig:
    """One multi-worker training job.

    Attributes:
        name: TFJob name (a DNS label, at most 63 characters).
        namespace: Namespace to run in (the launcher's own by default).
        image: Trainer image.
        trainer_args: Arguments after ``tfrecord-suite train`` (same as the single-pod path).
        workers: Replicas in all, the chief included.
        placement: Accelerators, node selectors, tolerations and ``/dev/shm`` of each replica.
        service_account: Kubernetes service account of the replicas (Workload Identity to GCS).
        run_id: Pipeline run the job belongs to (a label, so a retried task adopts its job).
        keep_on_failure: Leave a failed job and its pods for inspection instead of deleting them.
        timeout_seconds: Give up (and delete the job) after this long.
        poll_seconds: Time between status checks.
        backoff_limit: Replica restarts the operator allows before failing the job.
        log_lines: Lines of each replica's log reported at the end (and in a failure).

    """

    name: str
    image: str
    trainer_args: list[str]
    workers: int
    namespace: str = ""
    placement: Placement = dataclasses.field(default_factory=Placement)
    service_account: str = "tfrecord-suite"
    run_id: str = ""
    keep_on_failure: bool = False
    timeout_seconds: float = 24 * 3600.0
    poll_seconds: float = 10.0
    backoff_limit: int = 3
    log_lines: int = 40

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError(f"a TFJob needs at least one replica (got {self.workers})")
        if not self.name or len(self.name) > 63:
            raise ValueError(f"TFJob name {self.name!r} must be 1-63 characters")


def job_name(run_id: str, prefix: str = "tfrs-train") -> str:
    """A stable, valid TFJob name for a pipeline run."""
    return f"{prefix}-{hashlib.sha256(run_id.encode()).hexdigest()[:12]}"


def current_namespace(default: str = "default") -> str:
    """The namespace this pod runs in (its service account's), or ``default`` outside a cluster."""
    try:
        with open(NAMESPACE_FILE) as fh:
            return fh.read().strip() or default
    except OSError:
        return default


def render_tfjob(config: TFJobConfig) -> dict[str, Any]:
    """The ``TFJob`` object: a chief and ``workers - 1`` workers, each placed the same way."""
    placement = config.placement
    labels = {"app.kubernetes.io/name": "tfrecord-suite", "app.kubernetes.io/component": "trainer"}
    if config.run_id:
        labels[RUN_LABEL] = _label_value(config.run_id)
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": config.image,
        "command": ["tfrecord-suite", "train"],
        "args": list(config.trainer_args),
        "env": [
            {"name": "PYTHONUNBUFFERED", "value": "1"},
            {"name": "TF_CPP_MIN_LOG_LEVEL", "value": "2"},
        ],
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
        "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True},
    }
    limits = placement.limits()
    if limits:
        container["resources"] = {"limits": limits}
    pod_spec: dict[str, Any] = {
        "serviceAccountName": config.service_account,
        "containers": [container],
        "volumes": [
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": placement.shm_size}}
        ],
    }
    if placement.node_selector():
        pod_spec["nodeSelector"] = placement.node_selector()
    if placement.tolerations():
        pod_spec["tolerations"] = placement.tolerations()

    def replica(count: int) -> dict[str, Any]:
        return {
            "replicas": count,
            "restartPolicy": "OnFailure",
            "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec},
        }

    replicas = {"Chief": replica(1)}
    if config.workers > 1:
        replicas["Worker"] = replica(config.workers - 1)
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TFJob",
        "metadata": {"name": config.name, "namespace": config.namespace, "labels": labels},
        "spec": {
            "runPolicy": {
                "backoffLimit": config.backoff_limit,
                "activeDeadlineSeconds": int(config.timeout_seconds),
                # pods stay while the job runs so their logs can be read; deleting the job
                # removes them
                "cleanPodPolicy": "None",
            },
            "tfReplicaSpecs": replicas,
        },
    }


def _label_value(text: str) -> str:
    """A valid label value (<= 63 characters of [A-Za-z0-9_.-])."""
    safe = "".join(c if c.isalnum() or c in "_.-" else "-" for c in text).strip("-_.")
    return safe[:63].rstrip("-_.") or "run"


def job_state(job: dict[str, Any]) -> tuple[str, str]:
    """``(state, message)`` from a TFJob's status: the last true condition's type."""
    conditions = (job.get("status") or {}).get("conditions") or []
    true = [c for c in conditions if str(c.get("status")) == "True"]
    if not true:
        return "Pending", ""
    last = true[-1]
    return last.get("type", "Unknown"), last.get("message", "")


def _retrying(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Retry on transient Kubernetes API errors (429, 5xx, connection failures)."""
    from google.api_core import retry as retry_lib
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    def transient(exc: Exception) -> bool:
        if isinstance(exc, ApiException):
            return exc.status in _RETRYABLE_STATUS
        return isinstance(exc, HTTPError | ConnectionError)

    return retry_lib.Retry(
        predicate=transient, initial=0.5, maximum=10.0, multiplier=2.0, timeout=120.0
    )(fn)


class TFJobLauncher:
    """Creates a TFJob, waits for it, and cleans it up, through the official Kubernetes client."""

    def __init__(
        self,
        api_client: Any = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ):
        """Use ``api_client``, or load in-cluster config (kubeconfig outside a cluster)."""
        from kubernetes import client, config

        if api_client is None:
            try:
                config.load_incluster_config()
            except config.ConfigException:
                # the client reads KUBECONFIG when it is imported; read it now instead
                path = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
                try:
                    config.load_kube_config(config_file=path)
                except (config.ConfigException, OSError) as exc:
                    raise TFJobError(
                        "no Kubernetes API to launch the TFJob with: not in a cluster, and "
                        f"{path} is not a usable kubeconfig ({exc})"
                    ) from None
            api_client = client.ApiClient()
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)
        self._sleep = sleep
        self._clock = clock

    # ------------------------------------------------------------------------------- API calls

    def _create(self, body: dict[str, Any]) -> dict[str, Any]:
        ns = body["metadata"]["namespace"]
        return _retrying(self.custom.create_namespaced_custom_object)(
            GROUP, VERSION, ns, PLURAL, body
        )

    def _get(self, namespace: str, name: str) -> dict[str, Any]:
        return _retrying(self.custom.get_namespaced_custom_object)(
            GROUP, VERSION, namespace, PLURAL, name
        )

    def delete(self, namespace: str, name: str) -> None:
        """Delete the job and (foreground propagation) its pods; a missing job is fine."""
        from kubernetes.client.exceptions import ApiException

        try:
            _retrying(self.custom.delete_namespaced_custom_object)(
                GROUP, VERSION, namespace, PLURAL, name, propagation_policy="Foreground"
            )
            _LOG.info("deleted TFJob %s/%s", namespace, name)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def replica_logs(self, namespace: str, name: str, lines: int) -> dict[str, dict[str, Any]]:
        """Each replica pod's phase, exit code and last ``lines`` log lines."""
        from kubernetes.client.exceptions import ApiException

        pods = _retrying(self.core.list_namespaced_pod)(
            namespace, label_selector=f"{JOB_NAME_LABEL}={name}"
        )
        out = {}
        for pod in pods.items:
            labels = pod.metadata.labels or {}
            replica = (
                f"{labels.get(REPLICA_TYPE_LABEL, '?')}-{labels.get(REPLICA_INDEX_LABEL, '?')}"
            )
            exit_code = None
            for status in (pod.status.container_statuses or []) if pod.status else []:
                terminated = status.state.terminated if status.state else None
                if status.name == CONTAINER and terminated is not None:
                    exit_code = terminated.exit_code
            try:
                log = _retrying(self.core.read_namespaced_pod_log)(
                    pod.metadata.name, namespace, container=CONTAINER, tail_lines=lines
                )
            except ApiException as exc:
                log = f"(log unavailable: {exc.status} {exc.reason})"
            out[replica] = {
                "pod": pod.metadata.name,
                "phase": pod.status.phase if pod.status else None,
                "exit_code": exit_code,
                "log": log or "",
            }
        return dict(sorted(out.items()))

    # ------------------------------------------------------------------------------------ run

    def run(self, config: TFJobConfig) -> dict[str, Any]:
        """Create (or adopt) the job, wait for it, clean up; return its final status.

        Raises:
            TFJobError: A replica failed (its log tail is in the message), the job did not
                finish within ``timeout_seconds``, or a job of another run holds the name.
            TFJobCancelled: SIGTERM arrived (the kfp task was cancelled); the job was deleted.

        """
        from kubernetes.client.exceptions import ApiException

        config.namespace = config.namespace or current_namespace()
        ns, name = config.namespace, config.name
        body = render_tfjob(config)
        try:
            self._create(body)
            _LOG.info("created TFJob %s/%s: 1 chief + %d workers", ns, name, config.workers - 1)
        except ApiException as exc:
            if exc.status != 409:
                raise TFJobError(
                    f"could not create TFJob {ns}/{name}: {exc.status} {exc.reason}"
                ) from exc
            existing = self._get(ns, name)
            theirs = (existing.get("metadata", {}).get("labels") or {}).get(RUN_LABEL)
            if not config.run_id or theirs != body["metadata"]["labels"].get(RUN_LABEL):
                raise TFJobError(
                    f"TFJob {ns}/{name} already exists and belongs to another run ({theirs})"
                ) from None
            _LOG.info(
                "TFJob %s/%s exists from an earlier attempt of this run: adopting it", ns, name
            )
        failed, cancelled = True, False
        try:
            with _cancel_on_sigterm():
                try:
                    state, message = self._wait(config)
                except TFJobCancelled:
                    cancelled = True
                    raise
            if state == "Succeeded":
                failed = False
                logs = self.replica_logs(ns, name, config.log_lines)
                for replica, info in logs.items():
                    _LOG.info("%s (%s) log tail:\n%s", replica, info["pod"], info["log"])
                return {"name": name, "namespace": ns, "state": state, "replicas": logs}
            logs = self.replica_logs(ns, name, config.log_lines)
            raise TFJobError(_failure_message(ns, name, state, message, logs))
        finally:
            if failed and config.keep_on_failure and not cancelled:
                _LOG.warning("keeping failed TFJob %s/%s for inspection", ns, name)
            else:
                self.delete(ns, name)

    def _wait(self, config: TFJobConfig) -> tuple[str, str]:
        deadline = self._clock() + config.timeout_seconds
        last = None
        while True:
            job = self._get(config.namespace, config.name)
            state, message = job_state(job)
            replicas = (job.get("status") or {}).get("replicaStatuses") or {}
            summary = (
                state,
                tuple(sorted((k, tuple(sorted(v.items()))) for k, v in replicas.items())),
            )
            if summary != last:
                counts = ", ".join(
                    f"{k}: " + " ".join(f"{s}={n}" for s, n in sorted(v.items()) if n)
                    for k, v in sorted(replicas.items())
                )
                _LOG.info("TFJob %s: %s %s", config.name, state, counts)
                last = summary
            if state in ("Succeeded", "Failed"):
                return state, message
            if self._clock() >= deadline:
                return "TimedOut", f"not finished after {config.timeout_seconds:.0f} s"
            self._sleep(config.poll_seconds)


def _failure_message(
    ns: str, name: str, state: str, message: str, logs: dict[str, dict[str, Any]]
) -> str:
    bad = [r for r, i in logs.items() if i["exit_code"] not in (None, 0) or i["phase"] == "Failed"]
    lines = [f"TFJob {ns}/{name} {state}: {message or 'no message'}"]
    for replica in bad or list(logs):
        info = logs[replica]
        lines.append(
            f"--- {replica} (pod {info['pod']}, phase {info['phase']}, exit code "
            f"{info['exit_code']}), last lines:\n{info['log'].rstrip()}"
        )
    return "\n".join(lines)


@contextlib.contextmanager
def _cancel_on_sigterm() -> Iterator[None]:
    """Turn SIGTERM (kfp cancelling the task) into TFJobCancelled so ``finally`` cleans up."""

    def handler(signum: int, frame: Any) -> None:
        raise TFJobCancelled("cancelled (SIGTERM): deleting the TFJob")

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: cancellation is the caller's business
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
