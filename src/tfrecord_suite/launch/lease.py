"""A run's lease: what the train step creates outlives the step by minutes at most.

Everything the train step creates on Kubernetes (its TrainJob or TFJob, its tf.data service)
names one owner, and Kubernetes' garbage collector deletes an object once its owner is gone.
That owner cannot be the step's pod: a cancelled step's pod is not deleted (Kubeflow's
Terminate sets its ``activeDeadlineSeconds`` to 0, which stops its containers; the pod object
stays until the persistence agent's TTL, 24 h), nor is the pod of a launcher that was killed
or lost its node. Nor can the step's own cleanup always finish when it is cancelled: on Kubeflow
Pipelines 2.17, Argo signals the step's process group, KFP's launcher (the step's parent) exits
at once, and the container stops with it, so the step's SIGTERM handler races the container's
end (it won on the one-node cluster: its deletes reached the API server); the lease's deadline
ends what it could not.
A TrainJob's own ``activeDeadlineSeconds`` cannot be pushed forward either
(immutable in Trainer v2's CRD).

The owner is a lease: a ``batch/v1`` Job with ``parallelism: 0`` (it never runs a pod) whose
``activeDeadlineSeconds`` the launcher pushes forward every :data:`RENEW_SECONDS` while it
lives; a Job's deadline may be changed, and the Job controller re-reads it
(``updateJob`` in kubernetes ``pkg/controller/job/job_controller.go``). When the renewals stop
(the step cancelled, its process killed, its node lost), the Job controller fails the Job at the
deadline (``DeadlineExceeded``, counted from ``status.startTime``, which it sets with no pod),
the TTL-after-finished controller deletes it (``ttlSecondsAfterFinished: 0``), and the garbage
collector deletes every object that names it as owner, their pods with them. The lease itself is
owned by the step's pod, so deleting that pod ends everything at once, as before.

The deadline counts on the API server's clock, from the Job's ``status.startTime``. Each renewal
reckons the server's elapsed time from the ``Date`` header of the API server's last reply and
the Job's start (or creation) time in it, plus this process's monotonic time since that reply,
so clock skew between the launcher and the cluster never shortens the lease.

Where a queueing controller suspends every Job (Kueue with ``manageJobsWithoutQueueName``), a
suspended lease's deadline does not run: the objects then live as long as the step's pod.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

from tfrecord_suite.launch.kube import (
    NO_SIDECAR,
    RUN_LABEL,
    JobCancelled,
    JobError,
    cancel_on_sigterm,
    container_security,
    current_namespace,
    label_value,
    pod_security,
    retrying,
)

_LOG = logging.getLogger(__name__)

#: How long the launched objects outlive the last renewal (the Job's deadline beyond it): how
#: long a step that could not clean up after itself holds its nodes (killed, its node lost, or,
#: on Kubeflow Pipelines 2.17, its SIGTERM handler cut short: KFP's launcher exits at once on
#: the signal Argo sends the step's process group, and the container stops with it).
LEASE_SECONDS = 120
#: How often the launcher pushes the deadline forward (an API server unreachable for longer
#: than the lease's remaining time ends the job).
RENEW_SECONDS = 30
#: Seconds added to every deadline for the ``Date`` header's whole seconds.
_MARGIN = 2
LEASE_LABEL = "tfrecord-suite/lease"


def lease_name(job_name: str) -> str:
    """The lease of the objects named after ``job_name`` (a run's)."""
    return f"{job_name}-lease"


class Lease:
    """A renewed deadline that every object the train step creates names as its owner.

    Use as a context manager: entering creates the lease (or adopts a live one of the same run,
    a retried step's) and starts renewing it in a thread; inside, SIGTERM raises
    :class:`~tfrecord_suite.launch.kube.JobCancelled`, so every ``finally`` deletes what it
    created; leaving stops the renewals and deletes the lease (whatever still names it as owner
    goes with it).

    Attributes:
        name: The Job's name.
        namespace: Its namespace (the step's own by default).
        seconds: The deadline beyond each renewal.
        renew_seconds: Time between renewals.

    """

    def __init__(
        self,
        api_client: Any,
        name: str,
        image: str,
        *,
        namespace: str = "",
        run_id: str = "",
        owner: dict[str, Any] | None = None,
        seconds: int = LEASE_SECONDS,
        renew_seconds: float = RENEW_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ):
        from kubernetes import client

        if renew_seconds >= seconds:
            raise ValueError(f"renew every {renew_seconds} s, within the {seconds} s lease")
        self.batch = client.BatchV1Api(api_client)
        self.name = name
        self.image = image
        self.namespace = namespace or current_namespace()
        self.run_id = run_id
        self.owner = owner
        self.seconds = seconds
        self.renew_seconds = renew_seconds
        self._clock = clock
        self.uid = ""
        self.renewals = 0
        # the API server's time since the Job started, as of self._mark on our clock
        self._server_elapsed = 0.0
        self._mark = clock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._keep_seconds: float | None = None

    # -------------------------------------------------------------------------- the object

    def labels(self) -> dict[str, str]:
        """The lease's labels: the run's (for adoption) and the lease's own."""
        labels = {LEASE_LABEL: "true", "app.kubernetes.io/name": "tfrecord-suite"}
        if self.run_id:
            labels[RUN_LABEL] = label_value(self.run_id)
        return labels

    def body(self) -> dict[str, Any]:
        """The Job: no pod ever (``parallelism: 0``), a deadline, deleted once it ends."""
        meta: dict[str, Any] = {"name": self.name, "labels": self.labels()}
        if self.owner:
            meta["ownerReferences"] = [dict(self.owner)]
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": meta,
            "spec": {
                "parallelism": 0,
                "activeDeadlineSeconds": self.seconds,
                "ttlSecondsAfterFinished": 0,
                "backoffLimit": 0,
                # never instantiated (parallelism 0); a Job must still have a valid template
                "template": {
                    "metadata": {"labels": {LEASE_LABEL: "true", **NO_SIDECAR}},
                    "spec": {
                        "restartPolicy": "Never",
                        "automountServiceAccountToken": False,
                        "securityContext": pod_security(runAsUser=10001),
                        "containers": [
                            {
                                "name": "lease",
                                "image": self.image,
                                "command": ["true"],
                                "resources": {
                                    "requests": {"cpu": "10m", "memory": "16Mi"},
                                    "limits": {"cpu": "10m", "memory": "16Mi"},
                                },
                                "securityContext": container_security(readOnlyRootFilesystem=True),
                            }
                        ],
                    },
                },
            },
        }

    def owner_reference(self) -> dict[str, Any]:
        """The ``ownerReference`` the launched objects carry (after the lease is acquired)."""
        if not self.uid:
            raise RuntimeError("the lease is not acquired yet")
        return {"apiVersion": "batch/v1", "kind": "Job", "name": self.name, "uid": self.uid}

    # ---------------------------------------------------------------------------- lifecycle

    def acquire(self) -> None:
        """Create the lease, or adopt a live one of this run (deleting an expired one first)."""
        from kubernetes.client.exceptions import ApiException

        deadline = self._clock() + 120
        while True:
            try:
                job, _, headers = retrying(self.batch.create_namespaced_job_with_http_info)(
                    self.namespace, self.body()
                )
                self._remember(job, headers)
                _LOG.info(
                    "lease %s/%s: what this step creates lives at most %d s past its last renewal",
                    self.namespace,
                    self.name,
                    self.seconds,
                )
                return
            except ApiException as exc:
                if exc.status != 409:
                    raise JobError(
                        f"could not create the lease Job {self.namespace}/{self.name}: "
                        f"{exc.status} {exc.reason}"
                    ) from exc
            if self._adopt():
                return
            if self._clock() > deadline:
                raise JobError(f"the expired lease {self.namespace}/{self.name} was not deleted")
            time.sleep(2.0)  # the expired lease is being deleted

    def _adopt(self) -> bool:
        """Adopt the existing lease if it is this run's and alive; else start deleting it."""
        from kubernetes.client.exceptions import ApiException

        try:
            job, _, headers = retrying(self.batch.read_namespaced_job_with_http_info)(
                self.name, self.namespace
            )
        except ApiException as exc:
            if exc.status == 404:
                return False  # deleted meanwhile: create again
            raise
        theirs = (job.metadata.labels or {}).get(RUN_LABEL)
        if not self.run_id or theirs != label_value(self.run_id):
            raise JobError(
                f"Job {self.namespace}/{self.name} already exists and belongs to another run "
                f"({theirs})"
            )
        if _finished(job) or job.metadata.deletion_timestamp:
            _LOG.info("lease %s/%s expired: waiting for it to go", self.namespace, self.name)
            self._delete()
            return False
        self._remember(job, headers)
        _LOG.info("lease %s/%s is this run's: adopting it", self.namespace, self.name)
        self.renew(adopt=True)
        return True

    def renew(self, adopt: bool = False, seconds: float | None = None) -> None:
        """Push the deadline ``seconds`` (default :attr:`seconds`) past the server's now.

        Adopting, the lease is also made the step pod's (this attempt's).

        Raises:
            JobError: The lease had already ended (what it owned is being deleted).

        """
        elapsed = self._server_elapsed + (self._clock() - self._mark)
        patch = [
            {
                "op": "replace",
                "path": "/spec/activeDeadlineSeconds",
                "value": math.ceil(elapsed + (self.seconds if seconds is None else seconds))
                + _MARGIN,
            }
        ]
        if adopt and self.owner:
            patch.append({"op": "add", "path": "/metadata/ownerReferences",
                          "value": [dict(self.owner)]})  # fmt: skip
        job, _, headers = retrying(self.batch.patch_namespaced_job_with_http_info)(
            self.name, self.namespace, patch
        )
        self._remember(job, headers)
        if _finished(job):
            raise JobError(
                f"the lease {self.namespace}/{self.name} ended before it was renewed (the "
                "launcher could not reach the API server in time): what this step created is "
                "being deleted"
            )
        self.renewals += 1

    def _remember(self, job: Any, headers: Any) -> None:
        """Note the lease's UID and the server's time since its start, from a reply."""
        self.uid = job.metadata.uid or self.uid
        self._mark = self._clock()
        started = (job.status.start_time if job.status else None) or job.metadata.creation_timestamp
        now = _server_time(headers)
        if started is not None and now is not None:
            self._server_elapsed = max(0.0, (now - started).total_seconds())

    def keep(self, seconds: float) -> None:
        """On leaving, end the lease ``seconds`` later instead of at once: what it owns stays.

        For a failed job kept for inspection: leaving sets the deadline ``seconds`` past the
        API server's now and neither renews nor deletes the lease; the Job controller ends it
        then and the garbage collector deletes what it still owns (at once, with the lease,
        when the step's pod is deleted first). A cancelled step deletes it all the same.
        """
        self._keep_seconds = seconds

    def _renew_until_stopped(self) -> None:
        while not self._stop.wait(self.renew_seconds):
            try:
                self.renew()
            except JobError as exc:
                _LOG.error("%s", exc)
                return
            except Exception as exc:  # keep trying: the deadline leaves minutes for it
                _LOG.warning("could not renew lease %s/%s: %s", self.namespace, self.name, exc)

    def _delete(self) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            # background: the garbage collector deletes what the lease owns, as when it expires
            retrying(self.batch.delete_namespaced_job)(
                self.name, self.namespace, propagation_policy="Background"
            )
        except ApiException as exc:
            if exc.status != 404:
                raise

    def __enter__(self) -> Lease:
        """Acquire, renew in a thread, and turn SIGTERM into ``JobCancelled`` until leaving."""
        self.acquire()
        self._thread = threading.Thread(
            target=self._renew_until_stopped, name=f"lease-{self.name}", daemon=True
        )
        self._thread.start()
        self._cancel = cancel_on_sigterm("objects this step created")
        self._cancel.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        """Stop renewing; delete the lease (and what it owns), or, kept, let it end later."""
        try:
            self._cancel.__exit__(*exc)
        finally:
            self._stop.set()
            if self._thread is not None:
                self._thread.join(timeout=30)
            cancelled = exc and isinstance(exc[1], JobCancelled)
            if self._keep_seconds is not None and not cancelled:
                try:
                    self.renew(seconds=self._keep_seconds)
                    _LOG.warning(
                        "lease %s/%s kept: what it owns goes in %.0f s, or with the step's pod",
                        self.namespace,
                        self.name,
                        self._keep_seconds,
                    )
                except Exception as err:  # the last renewal's deadline stands: it goes sooner
                    _LOG.warning("could not keep lease %s/%s: %s", self.namespace, self.name, err)
            else:
                self._delete()


def _finished(job: Any) -> bool:
    """Whether the Job has a true Complete or Failed condition (a lease only fails)."""
    conditions = (job.status.conditions if job.status else None) or []
    return any(c.type in ("Complete", "Failed") and c.status == "True" for c in conditions)


def _server_time(headers: Any) -> dt.datetime | None:
    """The API server's time from a reply's ``Date`` header (None without one)."""
    value = (headers or {}).get("Date") if headers is not None else None
    if not value:
        return None
    try:
        return email.utils.parsedate_to_datetime(value).astimezone(dt.UTC)
    except (TypeError, ValueError):
        return None
