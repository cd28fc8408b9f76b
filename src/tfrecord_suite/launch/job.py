"""The lifecycle of one multi-node training job: create or adopt, watch, report, clean up, cancel.

A kfp task is one pod. For ``workers > 1`` the train step becomes a launcher: it creates a
distributed job whose nodes run the same image and ``tfrecord-suite train`` arguments, waits for
it, reports each node's state and log tail, deletes it, and fails with the failing node's own
error. What differs between job APIs (the object, where its state is, how its pods are labelled)
is a :class:`JobKind`: :mod:`~tfrecord_suite.launch.trainjob` for Kubeflow Trainer v2,
:mod:`~tfrecord_suite.launch.tfjob` for the Training Operator v1. The lifecycle is written once,
here, in the manner of the GCPC launcher's ``job_remote_runner`` (create, poll, cancel on SIGTERM).

The job name is derived from the pipeline run, so a retried kfp task adopts the job its previous
attempt created instead of starting a second one.
"""

from __future__ import annotations

import abc
import dataclasses
import hashlib
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from tfrecord_suite.errors import UserError
from tfrecord_suite.launch.credentials import Credentials
from tfrecord_suite.launch.kube import (
    NO_SIDECAR,
    RUN_LABEL,
    TRAINER_LABELS,
    JobCancelled,
    JobError,
    cancel_on_sigterm,
    create_or_adopt,
    current_namespace,
    label_value,
    log_unschedulable,
    retrying,
    unschedulable,
)
from tfrecord_suite.launch.placement import Placement

_LOG = logging.getLogger(__name__)

#: How long a job's node is given to stop before the kubelet kills it. A node has nothing to
#: save when stopped (its backups are per epoch); its trainer ends on SIGTERM at once unless
#: blocked in a collective with a peer that stopped first, which only the kill ends, and the
#: default 30 s kept a cancelled run's nodes that long (seen on the one-node cluster).
#: k8s/trainer-runtime's runtime says the same for TrainJobs' nodes.
NODE_GRACE_SECONDS = 10
#: How long a finished job (and its pods, with their logs) stays when the launcher did not
#: delete it: its pod was killed first, or it kept a failed job for inspection.
FINISHED_TTL_SECONDS = 3600


class JobRejected(JobError):
    """The API server refused the job object itself (400/422): its schema differs from ours."""


class LauncherUnavailable(UserError):
    """The cluster serves neither job API the launcher can use (or not the one asked for)."""


@dataclasses.dataclass
class JobConfig:
    """One multi-node training job.

    Attributes:
        name: Job name (a DNS label, at most 63 characters).
        image: Trainer image.
        trainer_args: Arguments after ``tfrecord-suite train`` (same as the single-pod path).
        workers: Nodes in all, the chief included.
        namespace: Namespace to run in (the launcher's own by default).
        placement: Accelerators, node selectors, tolerations and ``/dev/shm`` of each node.
        service_account: Kubernetes service account of the nodes (Workload Identity to GCS);
            empty for the namespace's default. The train step passes its own pod's account,
            so the nodes run as the pipeline run does.
        run_id: Pipeline run the job belongs to (a label, so a retried task adopts its job).
        owner: The ``ownerReference`` the job carries: the step's lease
            (:class:`~tfrecord_suite.launch.lease.Lease`), which ends minutes after the
            launcher stops renewing it, or the launcher's pod
            (:class:`~tfrecord_suite.podinfo.PodInfo`); Kubernetes deletes the job and its
            nodes with its owner, even if the launcher died before it could.
        credentials: The storage and image pull Secrets every node gets.
        keep_on_failure: Leave a failed job and its pods for inspection instead of deleting
            them (:attr:`JobLauncher.kept` says it did); it still goes with its owner.
        timeout_seconds: Give up (and delete the job) after this long.
        poll_seconds: Time between status checks.
        backoff_limit: Restarts allowed before failing the job.
        log_lines: Lines of each node's log reported at the end (and in a failure).

    """

    name: str
    image: str
    trainer_args: list[str]
    workers: int
    namespace: str = ""
    placement: Placement = dataclasses.field(default_factory=Placement)
    service_account: str = ""
    run_id: str = ""
    owner: dict[str, str] | None = None
    credentials: Credentials = dataclasses.field(default_factory=Credentials)
    keep_on_failure: bool = False
    timeout_seconds: float = 24 * 3600.0
    poll_seconds: float = 10.0
    backoff_limit: int = 3
    log_lines: int = 40

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise UserError(f"a training job needs at least one node (got {self.workers})")
        if not self.name or len(self.name) > 63:
            raise UserError(f"job name {self.name!r} must be 1-63 characters")

    def labels(self) -> dict[str, str]:
        """Labels of the job and its pods."""
        labels = dict(TRAINER_LABELS)
        if self.run_id:
            labels[RUN_LABEL] = label_value(self.run_id)
        return labels

    def metadata(self) -> dict[str, Any]:
        """The job object's ``metadata``: name, namespace, labels and the launcher as owner."""
        meta: dict[str, Any] = {
            "name": self.name,
            "namespace": self.namespace,
            "labels": self.labels(),
        }
        if self.owner:
            meta["ownerReferences"] = [dict(self.owner)]
        return meta

    def node_pod_metadata(self) -> dict[str, Any]:
        """``metadata`` of every node's pod: the job's labels, and no Istio sidecar."""
        return {
            "labels": {**self.labels(), **NO_SIDECAR},
            "annotations": dict(NO_SIDECAR),
        }

    def pod_identity(self) -> dict[str, Any]:
        """The node pods' ``serviceAccountName``, where one is set."""
        return {"serviceAccountName": self.service_account} if self.service_account else {}


@dataclasses.dataclass(frozen=True)
class NodeStatus:
    """One node (pod) of a job at the end: where it is, how it ended, its last log lines."""

    pod: str
    phase: str | None
    exit_code: int | None
    log: str

    @property
    def failed(self) -> bool:
        """Whether the node's trainer exited non-zero or its pod failed."""
        return self.exit_code not in (None, 0) or self.phase == "Failed"


class JobKind(abc.ABC):
    """What one job API needs: its resource, its object, its state and its pods."""

    kind: str
    group: str
    version: str
    plural: str
    #: The container running the trainer (its exit code and log are the node's).
    container: str

    @property
    def api_version(self) -> str:
        """``group/version``."""
        return f"{self.group}/{self.version}"

    @abc.abstractmethod
    def render(self, config: JobConfig) -> dict[str, Any]:
        """The job object for ``config``."""

    @abc.abstractmethod
    def pod_selector(self, name: str) -> str:
        """Label selector of the job's pods."""

    @abc.abstractmethod
    def node_name(self, labels: dict[str, str]) -> str:
        """``chief-0``-style name of the node a pod with these labels is."""

    @abc.abstractmethod
    def state(self, job: dict[str, Any]) -> tuple[str, str]:
        """``(state, message)``: ``Pending``, ``Running``, ``Succeeded`` or ``Failed``."""

    @abc.abstractmethod
    def progress(self, job: dict[str, Any]) -> str:
        """One line of node counts from the job's status, for the log."""

    def describe(self, config: JobConfig) -> str:
        """What was created, for the log."""
        return f"{config.workers} nodes"

    def creation_hint(self, status: int, body: str) -> str:
        """Extra advice for a create call the API server refused (empty: none)."""
        return ""


def job_name(run_id: str, prefix: str = "tfrs-train") -> str:
    """A stable, valid job name for a pipeline run."""
    return f"{prefix}-{hashlib.sha256(run_id.encode()).hexdigest()[:12]}"


def last_true_condition(job: dict[str, Any]) -> tuple[str, str] | None:
    """``(type, message)`` of the job's last condition whose status is True."""
    conditions = (job.get("status") or {}).get("conditions") or []
    true = [c for c in conditions if str(c.get("status")) == "True"]
    if not true:
        return None
    return true[-1].get("type", "Unknown"), true[-1].get("message", "")


def kubernetes_client() -> Any:
    """An ``ApiClient`` from the in-cluster config, or from the kubeconfig outside a cluster."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        # the client reads KUBECONFIG when it is imported; read it now instead
        path = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
        try:
            config.load_kube_config(config_file=path)
        except (config.ConfigException, OSError) as exc:
            raise LauncherUnavailable(
                "no Kubernetes API to launch the training job with: not in a cluster, and "
                f"{path} is not a usable kubeconfig ({exc})"
            ) from None
    return client.ApiClient()


class JobLauncher:
    """Creates a job of one :class:`JobKind`, waits for it and cleans it up."""

    def __init__(
        self,
        kind: JobKind,
        api_client: Any = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ):
        """Use ``api_client``, or load in-cluster config (kubeconfig outside a cluster)."""
        from kubernetes import client

        api_client = api_client if api_client is not None else kubernetes_client()
        self.kind = kind
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)
        self._sleep = sleep
        self._clock = clock
        #: Whether :meth:`run` left its failed job in place (``keep_on_failure``).
        self.kept = False

    # ------------------------------------------------------------------------------- API calls

    def _resource(self) -> tuple[str, str]:
        return self.kind.group, self.kind.version

    def _create(self, body: dict[str, Any]) -> dict[str, Any]:
        # Strict: a field this cluster's CRD version does not know is an error, not dropped
        return self.custom.create_namespaced_custom_object(
            *self._resource(),
            body["metadata"]["namespace"],
            self.kind.plural,
            body,
            field_validation="Strict",
        )

    def _get(self, namespace: str, name: str) -> dict[str, Any]:
        from kubernetes.client.exceptions import ApiException

        try:
            return retrying(self.custom.get_namespaced_custom_object)(
                *self._resource(), namespace, self.kind.plural, name
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
            raise JobError(
                f"{self.kind.kind} {namespace}/{name} was deleted while it ran (by hand, or "
                "with its owner: the step's lease ended)"
            ) from exc

    def delete(self, namespace: str, name: str) -> None:
        """Delete the job, its pods after it (background propagation); a missing job is fine.

        Not foreground: a TrainJob waiting for its dependents' deletion is still reconciled by
        the Trainer (v2.3), which makes its JobSet again as the collector deletes it, and the
        nodes' pods with it (seen on the one-node cluster, for a minute and more); gone at once,
        the TrainJob is made again by nothing.
        """
        from kubernetes.client.exceptions import ApiException

        try:
            retrying(self.custom.delete_namespaced_custom_object)(
                *self._resource(),
                namespace,
                self.kind.plural,
                name,
                propagation_policy="Background",
            )
            _LOG.info("deleted %s %s/%s", self.kind.kind, namespace, name)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def node_logs(self, namespace: str, name: str, lines: int) -> dict[str, NodeStatus]:
        """Each node's pod, phase, exit code and last ``lines`` log lines."""
        from kubernetes.client.exceptions import ApiException

        pods = retrying(self.core.list_namespaced_pod)(
            namespace, label_selector=self.kind.pod_selector(name)
        )
        out = {}
        for pod in pods.items:
            exit_code = None
            for status in (pod.status.container_statuses or []) if pod.status else []:
                terminated = status.state.terminated if status.state else None
                if status.name == self.kind.container and terminated is not None:
                    exit_code = terminated.exit_code
            try:
                log = retrying(self.core.read_namespaced_pod_log)(
                    pod.metadata.name, namespace, container=self.kind.container, tail_lines=lines
                )
            except ApiException as exc:
                log = f"(log unavailable: {exc.status} {exc.reason})"
            out[self.kind.node_name(pod.metadata.labels or {})] = NodeStatus(
                pod=pod.metadata.name,
                phase=pod.status.phase if pod.status else None,
                exit_code=exit_code,
                log=log or "",
            )
        return dict(sorted(out.items()))

    # ------------------------------------------------------------------------------------ run

    def run(self, config: JobConfig) -> dict[str, Any]:
        """Create (or adopt) the job, wait for it, clean up; return its final status.

        Raises:
            JobError: A node failed (its log tail is in the message), the job did not finish
                within ``timeout_seconds``, the API server refused it, or a job of another run
                holds the name.
            JobCancelled: SIGTERM arrived (the kfp task was cancelled); the job was deleted.

        """
        config.namespace = config.namespace or current_namespace()
        self._create_or_adopt(config)
        ns, name = config.namespace, config.name
        failed, cancelled = True, False
        try:
            with cancel_on_sigterm(self.kind.kind):
                try:
                    state, message = self._wait(config)
                except JobCancelled:
                    cancelled = True
                    raise
            logs = self.node_logs(ns, name, config.log_lines)
            if state != "Succeeded":
                raise JobError(self._failure_message(ns, name, state, message, logs))
            failed = False
            for node, status in logs.items():
                _LOG.info("%s (%s) log tail:\n%s", node, status.pod, status.log)
            return {
                "kind": self.kind.kind,
                "name": name,
                "namespace": ns,
                "state": state,
                "replicas": {n: dataclasses.asdict(s) for n, s in logs.items()},
            }
        finally:
            if failed and config.keep_on_failure and not cancelled:
                _LOG.warning("keeping failed %s %s/%s for inspection", self.kind.kind, ns, name)
                self.kept = True
            else:
                self.delete(ns, name)

    def _create_or_adopt(self, config: JobConfig) -> None:
        """Create the job, or adopt this run's from an earlier attempt (:func:`create_or_adopt`)."""
        from kubernetes.client.exceptions import ApiException

        ns, name, kind = config.namespace, config.name, self.kind.kind
        body = self.kind.render(config)
        try:
            created = create_or_adopt(
                lambda: self._create(body),
                lambda: self.custom.get_namespaced_custom_object(
                    *self._resource(), ns, self.kind.plural, name
                ),
                what=f"{kind} {ns}/{name}",
                run_label=body["metadata"]["labels"].get(RUN_LABEL, "") if config.run_id else "",
                owner=config.owner,
                sleep=self._sleep,
                clock=self._clock,
            )
        except ApiException as exc:
            hint = self.kind.creation_hint(exc.status, str(exc.body or ""))
            message = _status_message(exc)
            error = JobRejected if exc.status in (400, 422) else JobError
            raise error(
                f"could not create {kind} {ns}/{name}: {exc.status} {exc.reason}"
                + (f": {message}" if message else "")
                + (f"\n{hint}" if hint else "")
            ) from exc
        if created:
            _LOG.info("created %s %s/%s: %s", kind, ns, name, self.kind.describe(config))

    def _wait(self, config: JobConfig) -> tuple[str, str]:
        deadline = self._clock() + config.timeout_seconds
        last = None
        told: dict[str, str] = {}
        pending: dict[str, str] = {}
        while True:
            job = self._get(config.namespace, config.name)
            state, message = self.kind.state(job)
            summary = f"{state} {self.kind.progress(job)}".rstrip()
            if summary != last:
                _LOG.info("%s %s: %s", self.kind.kind, config.name, summary)
                last = summary
            if state in ("Succeeded", "Failed"):
                # a TrainJob fails at its own deadline (the same as ours) before the launcher's
                # ends: with nodes never placed, its "exceeded its active deadline" needs the why
                if state == "Failed" and pending:
                    message += "".join(f"; {pod} is Pending: {why}" for pod, why in pending.items())
                return state, message
            pending = unschedulable(
                self.core, config.namespace, self.kind.pod_selector(config.name)
            )
            log_unschedulable(pending, told)
            if self._clock() >= deadline:
                waiting = "".join(f"; {pod} is Pending: {why}" for pod, why in pending.items())
                return "TimedOut", f"not finished after {config.timeout_seconds:.0f} s{waiting}"
            self._sleep(config.poll_seconds)

    def _failure_message(
        self, ns: str, name: str, state: str, message: str, logs: dict[str, NodeStatus]
    ) -> str:
        bad = [node for node, status in logs.items() if status.failed]
        lines = [f"{self.kind.kind} {ns}/{name} {state}: {message or 'no message'}"]
        for node in bad or list(logs):
            status = logs[node]
            lines.append(
                f"--- {node} (pod {status.pod}, phase {status.phase}, exit code "
                f"{status.exit_code}), last lines:\n{status.log.rstrip()}"
            )
        return "\n".join(lines)


def _status_message(exc: Any) -> str:
    """The ``message`` of the Status object an API error carries (empty when there is none)."""
    import json

    try:
        return str(json.loads(exc.body).get("message", ""))
    except (TypeError, ValueError, AttributeError):
        return ""
