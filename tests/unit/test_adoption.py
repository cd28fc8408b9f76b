"""What a retried step may adopt of an earlier attempt's objects (launch.kube.create_or_adopt,
which the job launcher and the tf.data service's launcher both use), and a kept lease
(launch.lease.Lease.keep), with stand-ins for the API calls; the real API server, controllers
and garbage collector play the same in tests/integration/test_launch_ownership.py."""

from __future__ import annotations

import datetime as dt

import pytest
from kubernetes.client import V1Job, V1ObjectMeta, V1OwnerReference
from kubernetes.client.exceptions import ApiException

from tfrecord_suite.launch.kube import RUN_LABEL, JobCancelled, JobError, create_or_adopt
from tfrecord_suite.launch.lease import Lease

LEASE = {"apiVersion": "batch/v1", "kind": "Job", "name": "l", "uid": "lease-2"}


class Server:
    """One object name on a stand-in API server: ``create`` answers 409 while ``stored`` holds
    something; each ``read`` returns it, or 404 once ``gone_after`` reads have passed."""

    def __init__(self, stored, gone_after=None):
        self.stored, self.gone_after, self.reads, self.created = stored, gone_after, 0, 0

    def create(self):
        if self.stored is not None:
            raise ApiException(status=409)
        self.created += 1

    def read(self):
        self.reads += 1
        if self.gone_after is not None and self.reads > self.gone_after:
            self.stored = None
        if self.stored is None:
            raise ApiException(status=404)
        return self.stored


def _job(run="r", owner_uid="lease-2", deleting=False):
    meta = {"name": "j", "labels": {RUN_LABEL: run}}
    if owner_uid:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "l",
                                    "uid": owner_uid}]  # fmt: skip
    if deleting:
        meta["deletionTimestamp"] = "2026-11-26T00:00:00Z"
    return {"metadata": meta}


def _adopt(server, owner=LEASE, **kw):
    now = [0.0]
    slept = []

    def sleep(seconds):
        slept.append(seconds)
        now[0] += seconds

    created = create_or_adopt(server.create, server.read, what="TFJob ns/j", run_label="r",
                              owner=owner, sleep=sleep, clock=lambda: now[0], **kw)  # fmt: skip
    return created, slept


def test_its_own_live_object_under_the_same_lease_is_adopted():
    server = Server(_job())
    assert _adopt(server) == (False, [])
    assert server.created == 0


def test_an_object_without_owner_is_adopted_by_an_attempt_without_one():
    assert _adopt(Server(_job(owner_uid="")), owner=None) == (False, [])


def test_another_runs_object_is_refused():
    with pytest.raises(JobError, match=r"TFJob ns/j already exists and belongs to another run"):
        _adopt(Server(_job(run="other")))


@pytest.mark.parametrize(
    "stale", [_job(deleting=True), _job(owner_uid="lease-1"), _job(owner_uid="")],
    ids=["being deleted", "an earlier lease's", "nobody's"],
)  # fmt: skip
def test_one_it_may_not_adopt_is_waited_out_and_made_anew(stale):
    """Adopted, it would go under the new attempt (its deletion running, or its owner gone):
    the launcher waits until it is gone, then creates its own."""
    server = Server(stale, gone_after=3)
    created, slept = _adopt(server)
    assert created and server.created == 1 and len(slept) == 3


def test_one_that_does_not_go_is_refused_with_why():
    with pytest.raises(JobError, match=r"is being deleted, so it cannot be adopted, and it did "
                                       r"not go within 10 s: delete it to run again"):  # fmt: skip
        _adopt(Server(_job(deleting=True)), wait_seconds=10)
    with pytest.raises(JobError, match=r"owned by lease-1, not by this step's lease"):
        _adopt(Server(_job(owner_uid="lease-1")), wait_seconds=10)


def test_typed_objects_are_read_the_same():
    """The tf.data service's launcher reads typed objects (V1StatefulSet...), not dicts."""
    mine = V1Job(metadata=V1ObjectMeta(name="j", labels={RUN_LABEL: "r"}, owner_references=[
        V1OwnerReference(api_version="batch/v1", kind="Job", name="l", uid="lease-2")]))  # fmt: skip
    assert _adopt(Server(mine)) == (False, [])
    mine.metadata.deletion_timestamp = dt.datetime(2026, 11, 26, tzinfo=dt.UTC)
    created, slept = _adopt(Server(mine, gone_after=1))
    assert created and slept


# --------------------------------------------------------------------------------- a kept lease


class Batch:
    """The two calls a leaving lease makes: patch (its deadline) and delete."""

    def __init__(self):
        self.patches, self.deletes = [], []

    def patch_namespaced_job_with_http_info(self, name, namespace, patch):
        self.patches.append(patch)
        job = V1Job(metadata=V1ObjectMeta(name=name, uid="lease-2"))
        return job, 200, {}

    def delete_namespaced_job(self, name, namespace, propagation_policy):
        self.deletes.append(name)


def _leaving(error=None, keep=None):
    lease = Lease(None, "l", "img", namespace="ns", run_id="r", seconds=300, renew_seconds=60,
                  clock=lambda: 0.0)  # fmt: skip
    lease.batch = Batch()
    lease._cancel = type("NoSignal", (), {"__exit__": lambda *a: None})()
    if keep is not None:
        lease.keep(keep)
    lease.__exit__(type(error) if error else None, error, None)
    return lease.batch


def test_leaving_deletes_the_lease_and_a_kept_one_ends_at_its_last_deadline():
    plain = _leaving()
    assert plain.deletes == ["l"] and plain.patches == []
    kept = _leaving(JobError("a node failed"), keep=3600)
    assert kept.deletes == []
    (patch,) = kept.patches
    assert patch[0]["path"] == "/spec/activeDeadlineSeconds"
    assert 3600 <= patch[0]["value"] <= 3600 + 5
    # a cancelled step takes everything with it, kept or not
    assert _leaving(JobCancelled("cancelled (SIGTERM)"), keep=3600).deletes == ["l"]
