"""The step's lease (launch/lease.py) against the API server stand-in, which plays the Job
controller's deadline, the TTL-after-finished controller and the garbage collector as
Kubernetes does (tests/fakes/fakek8s.py ``tick``): what a launcher creates under its lease
stays while the launcher renews it, goes at once when the launcher is cancelled (SIGTERM), and
goes within the lease when the launcher is killed (SIGKILL), TrainJob and tf.data service
alike; a retried step adopts a live lease with everything under it.

The same rules on a real kube-apiserver and kube-controller-manager are the real-parts tests'."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from fakes.fakek8s import FakeKubernetes, Scenario
from tfrecord_suite.launch.job import JobError
from tfrecord_suite.launch.lease import Lease

POD = {"apiVersion": "v1", "kind": "Pod", "name": "train-pod", "uid": "u-1"}
SECONDS, RENEW = 4, 1

#: A launcher as the train step runs one: a lease, the run's tf.data service and a TrainJob
#: under it, waiting on the job (which the stand-in keeps Running).
LAUNCHER = textwrap.dedent(
    """
    import json, logging, sys
    from kubernetes import client
    from tfrecord_suite.launch.data_service import DataServiceLauncher
    from tfrecord_suite.launch.job import JobConfig, JobLauncher
    from tfrecord_suite.launch.lease import Lease
    from tfrecord_suite.launch.trainjob import TrainJob

    logging.basicConfig(level=logging.INFO)
    url, seconds, renew, pod = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    cfg = client.Configuration()
    cfg.host = url
    api = client.ApiClient(cfg)
    lease = Lease(api, "tfrs-train-x-lease", "img", namespace="ml", run_id="run-1",
                  owner=json.loads(pod), seconds=seconds, renew_seconds=renew)
    with lease:
        with DataServiceLauncher(api).running("tfrs-train-x-data", 2, "img", run_id="run-1",
                                              owner=lease.owner_reference(), namespace="ml"):
            print("running", flush=True)
            JobLauncher(TrainJob, api).run(JobConfig(
                name="tfrs-train-x", image="img", trainer_args=[], workers=2, namespace="ml",
                run_id="run-1", owner=lease.owner_reference(), poll_seconds=0.5))
    """
)
UNDER_LEASE = {
    ("Job", "tfrs-train-x-lease"),
    ("TrainJob", "tfrs-train-x"),
    ("Service", "tfrs-train-x-data"),
    ("StatefulSet", "tfrs-train-x-data-dispatcher"),
    ("StatefulSet", "tfrs-train-x-data-worker"),
    ("PodDisruptionBudget", "tfrs-train-x-data-worker"),
    ("NetworkPolicy", "tfrs-train-x-data"),
}


def _launch(k8s, seconds=SECONDS):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, k8s.url, str(seconds), str(RENEW), json.dumps(POD)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    seen = []
    for line in proc.stdout:  # its log, until the service runs
        seen.append(line)
        if line.strip() == "running":
            break
    else:
        pytest.fail("the launcher ended early:\n" + "".join(seen))
    _until(lambda: ("TrainJob", "tfrs-train-x") in k8s.stored(), 30)
    return proc


def _until(check, seconds):
    """Seconds until ``check()`` held (the stand-in's controllers run meanwhile); fail after."""
    start = time.monotonic()
    while not check():
        assert time.monotonic() - start < seconds, "timed out"
        time.sleep(0.2)
    return time.monotonic() - start


def _watch(k8s):
    def check():
        k8s.settle()
        return not k8s.stored()

    return check


def test_a_killed_launcher_leaves_nothing_after_its_lease():
    with FakeKubernetes(Scenario([("Running", "")])) as k8s:
        proc = _launch(k8s)
        try:
            time.sleep(SECONDS + 2)  # beyond one lease: only the renewals keep it all
            k8s.settle()
            assert k8s.stored() == UNDER_LEASE
            renewals = [p for p in k8s.patches if p[1] == "jobs/ml/tfrs-train-x-lease"]
            assert len(renewals) >= SECONDS
            killed = time.monotonic()
            proc.kill()  # SIGKILL: no finally runs, nothing is deleted by the launcher
            proc.wait()
            _until(_watch(k8s), SECONDS + 10)
            gone_after = time.monotonic() - killed
        finally:
            proc.kill()
        # the deadline, at most one renewal interval stale, then the TTL and the collector
        assert gone_after <= SECONDS + RENEW + 3, gone_after
        collected = {(d[0], d[2]) for d in k8s.objects_deleted if d[3] == "GarbageCollector"}
        assert ("statefulsets", "tfrs-train-x-data-worker") in collected
        assert ("ml", "tfrs-train-x", "GarbageCollector") in k8s.deleted


def test_a_cancelled_launcher_deletes_everything_at_once():
    with FakeKubernetes(Scenario([("Running", "")])) as k8s:
        proc = _launch(k8s, seconds=600)  # no deadline in sight: the launcher deletes it
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        assert "JobCancelled" in out and "cancelled (SIGTERM)" in out, out
        assert k8s.stored() == set()
        assert not [d for d in k8s.objects_deleted if d[3] == "GarbageCollector"]


def test_a_retried_step_adopts_the_live_lease_and_what_it_owns():
    with FakeKubernetes(Scenario([("Running", "")])) as k8s:
        first = _launch(k8s, seconds=30)
        first.kill()
        first.wait()
        uids = {o["metadata"]["name"]: o["metadata"]["uid"] for o in k8s.objects.values()}
        second = _launch(k8s, seconds=30)  # the retry: same run, another pod
        try:
            assert {o["metadata"]["name"]: o["metadata"]["uid"] for o in k8s.objects.values()} == (
                uids
            )  # the lease, the service: adopted, not made again
            assert len(k8s.created) == 1  # the TrainJob too (409, then adopted)
        finally:
            second.kill()
            second.wait()


def test_an_expired_lease_of_the_run_is_replaced_and_another_runs_refused():
    with FakeKubernetes(Scenario([("Running", "")])) as k8s:
        api = k8s.api_client()
        with Lease(api, "l", "img", namespace="ml", run_id="r", seconds=2, renew_seconds=1):
            pass
        stale = Lease(api, "l", "img", namespace="ml", run_id="r", seconds=1, renew_seconds=0.5)
        stale.acquire()  # never renewed: it ends after a second
        time.sleep(1.5)
        with Lease(api, "l", "img", namespace="ml", run_id="r") as lease:
            assert lease.uid != stale.uid
            with pytest.raises(JobError, match="belongs to another run"):
                Lease(api, "l", "img", namespace="ml", run_id="other").acquire()


def test_each_renewal_sets_the_deadline_past_the_servers_elapsed_time():
    """The deadline counts from the Job's start on the API server's clock: a renewal sets
    activeDeadlineSeconds to the server's elapsed time (its Date header minus the start) plus
    the lease, whatever this machine's clock says."""
    with FakeKubernetes(Scenario([("Running", "")])) as k8s:
        now = [1000.0]
        lease = Lease(k8s.api_client(), "l", "img", namespace="ml", run_id="r", seconds=60,
                      renew_seconds=10, clock=lambda: now[0])  # fmt: skip
        lease.acquire()
        now[0] += 3600  # this process thinks an hour passed (a suspended VM, a skewed clock)
        lease.renew()
        (_, _, patch) = k8s.patches[-1]
        assert patch[0]["value"] >= 3600 + 60
        now[0] += 0
        lease.renew()  # the server's Date says seconds passed: back to about one lease
        (_, _, patch) = k8s.patches[-1]
        assert 60 <= patch[0]["value"] <= 60 + 5
