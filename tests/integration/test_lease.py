"""The step's lease (launch/lease.py) on the real API server and controllers (tests/realparts,
marker ``k8s``): the real Job controller fails a lease at its deadline, the TTL-after-finished
controller deletes it and the garbage collector what it owns. What a launcher creates under its
lease goes at once when the launcher is cancelled (SIGTERM), deleted by the launcher itself; a
retried step adopts a live lease with everything under it; an expired one is replaced, another
run's refused; each renewal counts on the API server's clock. A killed launcher (SIGKILL) whose
objects go within the lease is test_k8s_apiserver.py's
test_a_killed_launcher_leaves_nothing_past_its_lease.

The launchers run as the run's account holding only the launcher's Role; the stand-in kubelet
(tests/realparts/standins.py) starts the tf.data service's pods. No Trainer runs: the TrainJob
stays Pending, and the launcher waits on it."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest
from support import api_calls

from realparts.processes import wait_for
from realparts.standins import Kubelet
from tfrecord_suite.launch.kube import JobError
from tfrecord_suite.launch.lease import Lease

pytestmark = pytest.mark.k8s

#: A launcher as the train step runs one: a lease, the run's tf.data service and a TrainJob
#: under it, waiting on the job.
LAUNCHER = textwrap.dedent(
    """
    import logging, sys
    from tfrecord_suite.launch.data_service_k8s import DataServiceLauncher
    from tfrecord_suite.launch.job import JobConfig, JobLauncher, kubernetes_client
    from tfrecord_suite.launch.lease import Lease
    from tfrecord_suite.launch.trainjob import TrainJob

    logging.basicConfig(level=logging.INFO)
    namespace, seconds, renew = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    api = kubernetes_client()
    lease = Lease(api, "tfrs-train-x-lease", "img", namespace=namespace, run_id="run-1",
                  seconds=seconds, renew_seconds=renew)
    with lease:
        service = DataServiceLauncher(api, sleep=lambda s: __import__("time").sleep(0.2))
        with service.running("tfrs-train-x-data", 2, "img", run_id="run-1",
                             owner=lease.owner_reference(), namespace=namespace):
            print("running", flush=True)
            JobLauncher(TrainJob, api).run(JobConfig(
                name="tfrs-train-x", image="img", trainer_args=[], workers=2,
                namespace=namespace, run_id="run-1", owner=lease.owner_reference(),
                poll_seconds=0.5))
    """
)
UNDER_LEASE = {
    ("jobs", "tfrs-train-x-lease"),
    ("trainjobs", "tfrs-train-x"),
    ("services", "tfrs-train-x-data"),
    ("statefulsets", "tfrs-train-x-data-dispatcher"),
    ("statefulsets", "tfrs-train-x-data-worker"),
    ("poddisruptionbudgets", "tfrs-train-x-data-worker"),
    ("networkpolicies", "tfrs-train-x-data"),
}


def _stored(k8s, namespace):
    """``(resource, name)`` of everything the launcher makes that is in ``namespace`` now."""
    from kubernetes import client

    api = k8s.api_client()
    found = set()
    for resource, listing in (
        ("jobs", client.BatchV1Api(api).list_namespaced_job),
        ("services", client.CoreV1Api(api).list_namespaced_service),
        ("statefulsets", client.AppsV1Api(api).list_namespaced_stateful_set),
        ("poddisruptionbudgets", client.PolicyV1Api(api).list_namespaced_pod_disruption_budget),
        ("networkpolicies", client.NetworkingV1Api(api).list_namespaced_network_policy),
    ):
        found |= {(resource, o.metadata.name) for o in listing(namespace).items}
    jobs = client.CustomObjectsApi(api).list_namespaced_custom_object(
        "trainer.kubeflow.org", "v1alpha1", namespace, "trainjobs"
    )
    return found | {("trainjobs", j["metadata"]["name"]) for j in jobs["items"]}


def _uids(k8s, namespace):
    from kubernetes import client

    api = k8s.api_client()
    out = {s.metadata.name: s.metadata.uid
           for s in client.AppsV1Api(api).list_namespaced_stateful_set(namespace).items}  # fmt: skip
    out |= {j.metadata.name: j.metadata.uid
            for j in client.BatchV1Api(api).list_namespaced_job(namespace).items}  # fmt: skip
    return out


def _launch(k8s, runner, seconds):
    proc = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, runner.namespace, str(seconds), "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "KUBECONFIG": str(runner.kubeconfig)},
    )
    seen = []
    for line in proc.stdout:  # its log, until the service runs
        seen.append(line)
        if line.strip() == "running":
            break
    else:
        pytest.fail("the launcher ended early:\n" + "".join(seen))
    wait_for(lambda: ("trainjobs", "tfrs-train-x") in _stored(k8s, runner.namespace),
             what="the TrainJob created")  # fmt: skip
    return proc


def _all_gone(k8s, namespace, timeout=60):
    from kubernetes import client

    core = client.CoreV1Api(k8s.api_client())
    wait_for(lambda: not _stored(k8s, namespace) and not core.list_namespaced_pod(namespace).items,
             timeout=timeout, what=f"nothing left in {namespace}")  # fmt: skip


def test_a_cancelled_launcher_deletes_everything_at_once(k8s, k8s_nodes, k8s_runner):
    ns = k8s_runner.namespace
    with Kubelet(k8s.api_client(), ns):
        proc = _launch(k8s, k8s_runner, seconds=600)  # no deadline in sight
        try:
            assert _stored(k8s, ns) == UNDER_LEASE
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert "JobCancelled" in out and "cancelled (SIGTERM)" in out, out
        _all_gone(k8s, ns)
    # each deleted by the launcher itself, none left for the lease's collector
    deleted = {
        tuple(uri.split("?")[0].split("/")[-2:])
        for verb, code, uri in api_calls(k8s, k8s_runner.user)
        if verb == "delete" and code == 200
    }
    assert deleted == UNDER_LEASE


def test_a_retried_step_adopts_the_live_lease_and_what_it_owns(k8s, k8s_nodes, k8s_runner):
    ns = k8s_runner.namespace
    with Kubelet(k8s.api_client(), ns):
        first = _launch(k8s, k8s_runner, seconds=30)
        first.kill()  # SIGKILL: nothing deleted
        first.wait()
        uids = _uids(k8s, ns)
        second = _launch(k8s, k8s_runner, seconds=30)  # the retry: same run, another pod
        try:
            # the lease and the service: adopted, not made again
            assert _uids(k8s, ns) == uids
            trainjobs = [c[1] for c in api_calls(k8s, k8s_runner.user, "trainjobs")
                         if c[0] == "create"]  # fmt: skip
            assert trainjobs == [201, 409]  # the TrainJob too
            second.send_signal(signal.SIGTERM)
            second.communicate(timeout=60)
        finally:
            if second.poll() is None:
                second.kill()
        _all_gone(k8s, ns)


def test_an_expired_lease_of_the_run_is_replaced_and_another_runs_refused(k8s, k8s_runner):
    from kubernetes import client

    api, ns = k8s_runner.api, k8s_runner.namespace
    batch = client.BatchV1Api(k8s.api_client())
    with Lease(api, "l", "img", namespace=ns, run_id="r", seconds=2, renew_seconds=1):
        pass
    stale = Lease(api, "l", "img", namespace=ns, run_id="r", seconds=1, renew_seconds=0.5)
    stale.acquire()  # never renewed: the Job controller fails it at its deadline

    def expired():
        job = batch.list_namespaced_job(ns).items
        return not job or any(c.type == "Failed" and c.status == "True"
                              for c in (job[0].status.conditions or []))  # fmt: skip

    wait_for(expired, what="the Job controller fails the lease")
    with Lease(api, "l", "img", namespace=ns, run_id="r") as lease:
        assert lease.uid != stale.uid
        with pytest.raises(JobError, match="belongs to another run"):
            Lease(api, "l", "img", namespace=ns, run_id="other").acquire()
    wait_for(lambda: not batch.list_namespaced_job(ns).items, what="the lease deleted")


def test_each_renewal_sets_the_deadline_past_the_servers_elapsed_time(k8s, k8s_runner):
    """The deadline counts from the Job's start on the API server's clock: a renewal sets
    activeDeadlineSeconds to the server's elapsed time (its Date header minus the start) plus
    the lease, whatever this machine's clock says."""
    from kubernetes import client

    batch = client.BatchV1Api(k8s.api_client())
    now = [1000.0]
    lease = Lease(k8s_runner.api, "l", "img", namespace=k8s_runner.namespace, run_id="r",
                  seconds=60, renew_seconds=10, clock=lambda: now[0])  # fmt: skip

    def deadline():
        return batch.read_namespaced_job("l", k8s_runner.namespace).spec.active_deadline_seconds

    lease.acquire()
    assert deadline() == 60
    now[0] += 3600  # this process thinks an hour passed (a suspended VM, a skewed clock)
    lease.renew()
    assert deadline() >= 3600 + 60
    lease.renew()  # the server's Date says seconds passed: back to about one lease
    assert 60 <= deadline() <= 60 + 5
    # the Job controller took the shorter deadline: the lease still runs
    job = batch.read_namespaced_job("l", k8s_runner.namespace)
    assert not [c for c in job.status.conditions or [] if c.status == "True"]
