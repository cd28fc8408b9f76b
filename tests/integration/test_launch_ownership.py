"""Nothing the train step creates outlives its run, on the real API server, Job controller,
TTL-after-finished controller and garbage collector (tests/realparts, marker ``k8s``), as the
run's account holding only the launcher's Role:

- a failed job kept for inspection (``keep_failed_tfjob``) is the lease's like everything else,
  and goes when the kept lease ends, while the step's pod still exists (it was the pod's, which
  a killed launcher's Kubeflow keeps up to a day);
- a retried step does not adopt an earlier attempt's job that is being deleted, or that an
  earlier lease owns (the garbage collector deletes it with that lease): it waits it out and
  creates its own.

No Training Operator runs: a stand-in writes the TFJob's status (tests/realparts/standins.py)."""

from __future__ import annotations

import threading
import time

import pytest
from support import api_calls, launch_as, stored_job

from realparts import standins
from realparts.processes import wait_for
from tfrecord_suite.launch import job as job_module
from tfrecord_suite.launch.credentials import Credentials
from tfrecord_suite.launch.job import JobConfig, JobLauncher, job_name
from tfrecord_suite.launch.kube import JobError
from tfrecord_suite.launch.lease import Lease
from tfrecord_suite.launch.placement import Placement
from tfrecord_suite.launch.tfjob import TFJob, render_tfjob
from tfrecord_suite.launch.train_step import StepLaunch, train_in_job
from tfrecord_suite.podinfo import PodInfo
from tfrecord_suite.train.trainer import TrainConfig

pytestmark = pytest.mark.k8s

#: No scheduler has this name: the stand-in step pod is never placed (it needs no kubelet).
UNSCHEDULED = "tfrs-unscheduled"


def _step_pod(k8s, namespace):
    """A pod standing for the train step's own: the lease's owner."""
    from kubernetes import client

    pod = client.CoreV1Api(k8s.api_client()).create_namespaced_pod(namespace, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train-pod"},
        "spec": {"schedulerName": UNSCHEDULED, "automountServiceAccountToken": False,
                 "containers": [{"name": "main", "image": "img"}]},
    })  # fmt: skip
    return PodInfo(run_id="run-k", pod_name="train-pod", pod_uid=pod.metadata.uid)


def _play_when_created(k8s, namespace, name, state, not_uid=""):
    """In the background: once the launcher created the TFJob (another than ``not_uid``), play
    its operator to ``state``."""

    def run():
        wait_for(lambda: (stored_job(k8s.api_client(), TFJob, namespace, name) or {}).get("metadata", {}).get("uid")
                 not in (None, not_uid), timeout=120, what=f"TFJob {name} created")  # fmt: skip
        standins.play_operator(k8s.api_client(), TFJob, namespace, name, state, "done",
                               failing_node="worker-0" if state == "Failed" else None)  # fmt: skip

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_a_kept_failed_job_is_the_leases_and_goes_when_the_kept_lease_ends(
    k8s, k8s_runner, tmp_path, monkeypatch
):
    ns = k8s_runner.namespace
    monkeypatch.setattr(job_module, "FINISHED_TTL_SECONDS", 6)  # kept this long (an hour)
    launch_as(monkeypatch, tmp_path, k8s_runner)  # the step's namespace
    pod = _step_pod(k8s, ns)
    name = job_name(pod.run_id)
    lease = Lease(k8s_runner.api, f"{name}-lease", "img", namespace=ns, run_id=pod.run_id,
                  owner=pod.owner_reference(), seconds=60, renew_seconds=1)  # fmt: skip
    config = TrainConfig(dataset=f"{tmp_path}/reg/d@1.0.0", model_dir=str(tmp_path / "m"))
    launch = StepLaunch(k8s_runner.api, pod.run_id, pod, None, Credentials(), [TFJob], 0, "img")
    played = _play_when_created(k8s, ns, name, "Failed")
    with pytest.raises(JobError, match=r"Failed: done\n--- worker-0"), lease:
        launch.lease = lease
        train_in_job(config, 2, Placement(), launch, "img", keep_failed=True)
    played.join(timeout=60)
    kept = stored_job(k8s.api_client(), TFJob, ns, name)
    assert kept is not None, "the failed job was not kept"
    (owner,) = kept["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Job", lease.name, lease.uid)
    # the kept lease ends at its deadline; its collector takes the job while the pod stays
    wait_for(lambda: stored_job(k8s.api_client(), TFJob, ns, name) is None, timeout=90,
             what="the kept job deleted with its lease")  # fmt: skip
    from kubernetes import client

    assert client.CoreV1Api(k8s.api_client()).read_namespaced_pod("train-pod", ns)
    deletes = [c for c in api_calls(k8s, k8s_runner.user, "tfjobs") if c[0] == "delete"]
    assert deletes == []  # not the launcher: the lease's end


def _live(runner, owner, **kw):
    return JobConfig(name="tfrs-train-abc", image="img", trainer_args=[], workers=2,
                     namespace=runner.namespace, run_id="run-1", owner=owner, poll_seconds=0.2,
                     **kw)  # fmt: skip


def _run_in_thread(runner, config):
    out = {}

    def run():
        try:
            out["result"] = JobLauncher(TFJob, runner.api, sleep=lambda s: time.sleep(0.2)).run(
                config
            )
        except Exception as exc:  # the test's assertions say what it was
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def _creates(k8s, runner):
    return [c[1] for c in api_calls(k8s, runner.user, "tfjobs") if c[0] == "create"]


def test_a_retry_waits_out_its_runs_job_being_deleted_and_creates_its_own(k8s, k8s_runner):
    """An earlier attempt's job of this run whose deletion is under way (held here by a
    finalizer) is not adopted: the launcher waits until it is gone and creates it anew."""
    from kubernetes import client

    ns = k8s_runner.namespace
    custom = client.CustomObjectsApi(k8s.api_client())
    body = render_tfjob(_live(k8s_runner, owner=None))
    body["metadata"]["finalizers"] = ["tfrecord-suite.test/hold"]
    old = custom.create_namespaced_custom_object(TFJob.group, TFJob.version, ns, TFJob.plural,
                                                 body)  # fmt: skip
    custom.delete_namespaced_custom_object(TFJob.group, TFJob.version, ns, TFJob.plural,
                                           "tfrs-train-abc")  # fmt: skip
    assert stored_job(k8s.api_client(), TFJob, ns, "tfrs-train-abc")["metadata"][
        "deletionTimestamp"
    ]
    thread, out = _run_in_thread(k8s_runner, _live(k8s_runner, owner=None))
    wait_for(lambda: 409 in _creates(k8s, k8s_runner), what="the launcher tried to create it")
    time.sleep(2)
    assert (
        thread.is_alive() and _creates(k8s, k8s_runner) and 201 not in _creates(k8s, k8s_runner)
    )  # waiting, not adopted
    played = _play_when_created(k8s, ns, "tfrs-train-abc", "Succeeded",
                                not_uid=old["metadata"]["uid"])  # fmt: skip
    custom.patch_namespaced_custom_object(TFJob.group, TFJob.version, ns, TFJob.plural,
                                          "tfrs-train-abc", {"metadata": {"finalizers": None}})  # fmt: skip
    thread.join(timeout=120)
    played.join(timeout=60)
    assert out.get("result", {}).get("state") == "Succeeded", out
    assert _creates(k8s, k8s_runner)[-1] == 201


def test_a_retry_does_not_adopt_a_job_an_earlier_lease_owns(k8s, k8s_runner):
    """The earlier attempt's lease ended (here: is deleted while the retry waits); the garbage
    collector deletes its job, which the retry, under a lease of its own, would otherwise have
    adopted and lost: it waits the job out and creates its own, owned by its lease."""
    from kubernetes import client

    ns = k8s_runner.namespace
    earlier = Lease(k8s.api_client(), "tfrs-train-abc-lease-1", "img", namespace=ns,
                    run_id="run-1", seconds=600)  # fmt: skip
    earlier.acquire()
    custom = client.CustomObjectsApi(k8s.api_client())
    old = custom.create_namespaced_custom_object(
        TFJob.group, TFJob.version, ns, TFJob.plural,
        render_tfjob(_live(k8s_runner, owner=earlier.owner_reference())),
    )  # fmt: skip
    with Lease(k8s_runner.api, "tfrs-train-abc-lease-2", "img", namespace=ns, run_id="run-1",
               seconds=60, renew_seconds=1) as lease:  # fmt: skip
        thread, out = _run_in_thread(k8s_runner, _live(k8s_runner, owner=lease.owner_reference()))
        wait_for(lambda: 409 in _creates(k8s, k8s_runner), what="the launcher tried to create it")
        time.sleep(2)
        assert thread.is_alive() and 201 not in _creates(k8s, k8s_runner)  # not adopted
        played = _play_when_created(k8s, ns, "tfrs-train-abc", "Succeeded",
                                    not_uid=old["metadata"]["uid"])  # fmt: skip
        client.BatchV1Api(k8s.api_client()).delete_namespaced_job(
            earlier.name, ns, propagation_policy="Background"
        )
        thread.join(timeout=120)
        played.join(timeout=60)
        assert out.get("result", {}).get("state") == "Succeeded", out
    creates = _creates(k8s, k8s_runner)
    assert creates[-1] == 201 and 409 in creates
