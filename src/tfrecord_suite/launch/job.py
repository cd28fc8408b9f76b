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
import contextlib
import copy
import dataclasses
import hashlib
import logging
import os
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

from tfrecord_suite.errors import UserError
from tfrecord_suite.launch.credentials import Credentials
from tfrecord_suite.launch.placement import Placement
from tfrecord_suite.podinfo import RUN_ID_LABEL

_LOG = logging.getLogger(__name__)

RUN_LABEL = "tfrecord-suite/run"
#: How long a job's node is given to stop before the kubelet kills it. A node has nothing to
#: save when stopped (its backups are per epoch); its trainer ends on SIGTERM at once unless
#: blocked in a collective with a peer that stopped first, which only the kill ends, and the
#: default 30 s kept a cancelled run's nodes that long (seen on the one-node cluster).
#: k8s/trainer-runtime's runtime says the same for TrainJobs' nodes.
NODE_GRACE_SECONDS = 10
#: Keeps Istio from injecting its sidecar into a training node. Kubeflow's docs ask for it on
#: TFJob pods in a profile namespace: the sidecar starts after the trainer (which then cannot
#: reach its peers) and never exits (so the pod never completes). Istio reads the label from
#: 1.10 on and the annotation before; both are set.
NO_SIDECAR = {"sidecar.istio.io/inject": "false"}
#: Every trainer pod's labels: a job's nodes, and the train step's own pod (the compiled
#: pipeline sets them). A tf.data service's NetworkPolicy admits exactly the pods with these.
TRAINER_LABELS = {
    "app.kubernetes.io/name": "tfrecord-suite",
    "app.kubernetes.io/component": "trainer",
}
#: The Pod Security Standards' ``restricted`` profile
#: (https://kubernetes.io/docs/concepts/security/pod-security-standards/#restricted), which
#: every pod the suite creates meets (Kubeflow enforces ``baseline`` in a profile namespace):
#: at the pod, non-root under the container runtime's default seccomp profile; at each
#: container, no privilege escalation and no capabilities.
RESTRICTED_POD_SECURITY = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
RESTRICTED_CONTAINER_SECURITY = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
}
#: How long a finished job (and its pods, with their logs) stays when the launcher did not
#: delete it: its pod was killed first, or it kept a failed job for inspection.
FINISHED_TTL_SECONDS = 3600
#: How long a retried step waits for an earlier attempt's object that it may not adopt (being
#: deleted, or owned by an earlier lease the garbage collector is deleting it with) to go.
ADOPT_WAIT_SECONDS = 120.0
NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
_RETRYABLE_STATUS = {0, 429, 500, 502, 503, 504}


class JobError(RuntimeError):
    """The job could not be created, failed, or did not finish in time."""


class JobRejected(JobError):
    """The API server refused the job object itself (400/422): its schema differs from ours."""


class JobCancelled(JobError):
    """The launcher was asked to stop (the kfp task was cancelled)."""


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


def pod_security(**extra: Any) -> dict[str, Any]:
    """A pod's ``securityContext``: :data:`RESTRICTED_POD_SECURITY` and ``extra`` (a fresh copy)."""
    return {**copy.deepcopy(RESTRICTED_POD_SECURITY), **extra}


def container_security(**extra: Any) -> dict[str, Any]:
    """A container's ``securityContext``: :data:`RESTRICTED_CONTAINER_SECURITY` and ``extra``."""
    return {**copy.deepcopy(RESTRICTED_CONTAINER_SECURITY), **extra}


def run_trainers(run_key: str, pipeline_run_id: str = "") -> list[dict[str, str]]:
    """The label selectors of a run's trainer pods, and of no other run's.

    A job's nodes carry the trainer labels and the run's :data:`RUN_LABEL`
    (:meth:`JobConfig.labels`); the train step's own pod, which trains itself when it launches
    no job, carries the trainer labels (the compiled pipeline sets them) and the label
    :data:`~tfrecord_suite.podinfo.RUN_ID_LABEL` with its run's id, which the KFP API server
    puts on every pod of a run.

    Args:
        run_key: What names the run's objects (:attr:`JobConfig.run_id`).
        pipeline_run_id: The pipeline run's id as the step's pod knows it (empty: unknown, and
            only the job's nodes are selected).

    """
    selectors = [{**TRAINER_LABELS, RUN_LABEL: label_value(run_key)}]
    if pipeline_run_id:
        selectors.append({**TRAINER_LABELS, RUN_ID_LABEL: pipeline_run_id})
    return selectors


def _metadata(obj: Any) -> tuple[dict[str, str], bool, set[str]]:
    """``(labels, being deleted, owner UIDs)`` of an object as read (a dict or a typed one)."""
    if isinstance(obj, dict):
        meta = obj.get("metadata") or {}
        owners = meta.get("ownerReferences") or []
        return (meta.get("labels") or {}, bool(meta.get("deletionTimestamp")),
                {o.get("uid", "") for o in owners})  # fmt: skip
    meta = obj.metadata
    owners = meta.owner_references or []
    return meta.labels or {}, meta.deletion_timestamp is not None, {o.uid for o in owners}


def create_or_adopt(
    create: Callable[[], Any],
    read: Callable[[], Any],
    *,
    what: str,
    run_label: str,
    owner: dict[str, Any] | None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    wait_seconds: float = ADOPT_WAIT_SECONDS,
) -> bool:
    """Create an object, or adopt the one an earlier attempt of the same run left under its name.

    An existing object is adopted only when it is this run's (its :data:`RUN_LABEL` is
    ``run_label``), is not being deleted, and names as owners exactly ``owner`` (none where
    ``owner`` is None): a retried step that adopted its run's live lease adopts what the lease
    owns. One being deleted, or owned by something else (an expired lease whose objects the
    garbage collector is deleting, or a pod), would be deleted under the new attempt: it is
    waited out, up to ``wait_seconds``, and created anew.

    Args:
        create: Creates the object (raises the client's ``ApiException``).
        read: Reads the object of that name (raises ``ApiException``; 404 when gone).
        what: ``Kind namespace/name``, for messages.
        run_label: This run's :data:`RUN_LABEL` value; empty: adopt nothing.
        owner: The ``ownerReference`` the object is created with.
        sleep: Waits between looks.
        clock: Monotonic seconds.
        wait_seconds: How long an object that may not be adopted is waited out.

    Returns:
        True when created, False when adopted.

    Raises:
        JobError: Another run's object holds the name, or one that may not be adopted did not
            go within ``wait_seconds``.
        ApiException: The create call was refused for another reason than the name (the
            caller says why).

    """
    from kubernetes.client.exceptions import ApiException

    deadline = clock() + wait_seconds
    ours = {owner["uid"]} if owner else set()
    told = ""
    while True:
        try:
            retrying(create)()
            return True
        except ApiException as exc:
            if exc.status != 409:
                raise
        try:
            existing = retrying(read)()
        except ApiException as exc:
            if exc.status == 404:
                continue  # gone meanwhile: create it again
            raise
        labels, deleting, owners = _metadata(existing)
        theirs = labels.get(RUN_LABEL)
        if not run_label or theirs != run_label:
            raise JobError(f"{what} already exists and belongs to another run ({theirs})")
        if deleting:
            why = "being deleted"
        elif owners != ours:
            why = f"owned by {', '.join(sorted(owners)) or 'nothing'}, not by this step's lease"
        else:
            _LOG.info("%s exists from an earlier attempt of this run: adopting it", what)
            return False
        if clock() >= deadline:
            raise JobError(
                f"{what} of an earlier attempt of this run is {why}, so it cannot be adopted, "
                f"and it did not go within {wait_seconds:.0f} s: delete it to run again"
            )
        if why != told:
            _LOG.info("%s of an earlier attempt is %s: waiting for it to go", what, why)
            told = why
        sleep(2.0)


def job_name(run_id: str, prefix: str = "tfrs-train") -> str:
    """A stable, valid job name for a pipeline run."""
    return f"{prefix}-{hashlib.sha256(run_id.encode()).hexdigest()[:12]}"


def current_namespace(default: str = "default") -> str:
    """The namespace this pod runs in (its service account's), or ``default`` outside a cluster."""
    try:
        with open(NAMESPACE_FILE) as fh:
            return fh.read().strip() or default
    except OSError:
        return default


def label_value(text: str) -> str:
    """A valid label value (<= 63 characters of [A-Za-z0-9_.-])."""
    safe = "".join(c if c.isalnum() or c in "_.-" else "-" for c in text).strip("-_.")
    return safe[:63].rstrip("-_.") or "run"


def last_true_condition(job: dict[str, Any]) -> tuple[str, str] | None:
    """``(type, message)`` of the job's last condition whose status is True."""
    conditions = (job.get("status") or {}).get("conditions") or []
    true = [c for c in conditions if str(c.get("status")) == "True"]
    if not true:
        return None
    return true[-1].get("type", "Unknown"), true[-1].get("message", "")


def unschedulable(core: Any, namespace: str, selector: str) -> dict[str, str]:
    """``pod -> the scheduler's reason`` for each pod of ``selector`` it cannot place yet.

    The reason is the scheduler's own sentence, e.g. ``0/3 nodes are available: 3 Insufficient
    cpu`` or ``pod has unbound immediate PersistentVolumeClaims``: what a user needs to see
    when a job or service waits forever on a pod that no node can take.
    """
    pods = retrying(core.list_namespaced_pod)(namespace, label_selector=selector)
    out = {}
    for pod in pods.items:
        for condition in (pod.status.conditions or []) if pod.status else []:
            if condition.type == "PodScheduled" and condition.reason == "Unschedulable":
                out[pod.metadata.name] = condition.message or "Unschedulable"
    return out


def log_unschedulable(reasons: dict[str, str], told: dict[str, str]) -> None:
    """Warn once for each pod and reason in ``reasons`` not yet in ``told`` (updated)."""
    for pod, reason in sorted(reasons.items()):
        if told.get(pod) != reason:
            _LOG.warning("pod %s is Pending: %s", pod, reason)
            told[pod] = reason


def retrying(fn: Callable[..., Any]) -> Callable[..., Any]:
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


@contextlib.contextmanager
def cancel_on_sigterm(kind: str) -> Iterator[None]:
    """Turn SIGTERM (kfp cancelling the task) into JobCancelled so ``finally`` cleans up.

    Nested uses stack: leaving one puts the handler of the one around it back.
    """

    def handler(signum: int, frame: Any) -> None:
        raise JobCancelled(f"cancelled (SIGTERM): deleting the {kind}")

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: cancellation is the caller's business
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
