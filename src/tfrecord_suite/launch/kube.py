"""The Kubernetes helpers every object the train step creates shares: the job, its lease, a service.

Labels that tie an object to its run and its trainers, the ``restricted`` security contexts,
create-or-adopt for a retried step, the API's transient errors retried, unschedulable pods
reported, the namespace a pod runs in, and SIGTERM (kfp cancelling the step) turned into
:class:`JobCancelled`. :mod:`.job` (the job's lifecycle), :mod:`.lease` (the run's lease) and
:mod:`.data_service_k8s` (a run's own tf.data service) import them from here.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

from tfrecord_suite.podinfo import RUN_ID_LABEL

_LOG = logging.getLogger(__name__)


RUN_LABEL = "tfrecord-suite/run"


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


#: How long a retried step waits for an earlier attempt's object that it may not adopt (being
#: deleted, or owned by an earlier lease the garbage collector is deleting it with) to go.
ADOPT_WAIT_SECONDS = 120.0


NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


_RETRYABLE_STATUS = {0, 429, 500, 502, 503, 504}


class JobError(RuntimeError):
    """The job could not be created, failed, or did not finish in time."""


class JobCancelled(JobError):
    """The launcher was asked to stop (the kfp task was cancelled)."""


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
