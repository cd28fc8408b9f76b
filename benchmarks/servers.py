"""The network part's stand-ins: a local GCS and a local S3, behind latency, on a CPU budget.

* GCS: fake-gcs-server over TLS, reached by TensorFlow's own ``gs://`` filesystem as
  ``storage.googleapis.com`` through a CONNECT proxy (``tests/fakes/gcs_tls.py``).
* S3: SeaweedFS, built from its Go module (``tests/realparts/seaweedfs.py``), reached by boto3
  at its endpoint through a plain relay.

Both relays (``tests/fakes/delayproxy.py``) hold every round trip for the delay a file holds,
which the readers set between variants. The servers and the relays run in processes of their
own, together in a cgroup limited to ``server_cpus`` CPUs (:class:`CpuBudget`) where this
process may make one: the stand-in is then a fixed bound, whose CPU time is measured beside each
variant, rather than a competitor for the readers' cores.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator

_LOG = logging.getLogger(__name__)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(ROOT, "tests")
_PERIOD_US = 100_000


class CpuBudget:
    """A cgroup whose processes share at most ``cpus`` CPUs, and the CPU time they used.

    cgroup v2 (``cpu.max``, ``cpu.stat``) or v1 (``cpu.cfs_quota_us``, ``cpuacct.usage``). Where
    no cgroup can be made (not root, no cgroup filesystem), it bounds nothing and says so.
    """

    def __init__(self, cpus: float, name: str):
        self.cpus = cpus
        self.folders: list[str] = []
        self.usage_file = ""  # v1: nanoseconds; v2: cpu.stat's usage_usec line
        self.description = "none: the servers share this machine's cores with the readers"
        if cpus <= 0:
            return
        try:
            self._make(name, cpus)
        except OSError as exc:
            _LOG.warning("no CPU budget for the servers (%s): they share the readers' cores", exc)
            self.remove()
            self.folders, self.usage_file = [], ""
            return
        self.description = f"{cpus:g} CPU (cgroup CPU quota) for the servers and the relays"

    def _make(self, name: str, cpus: float) -> None:
        quota = int(cpus * _PERIOD_US)
        if os.path.isfile("/sys/fs/cgroup/cgroup.controllers"):  # v2
            folder = f"/sys/fs/cgroup/{name}"
            os.mkdir(folder)
            self.folders = [folder]
            with open(f"{folder}/cpu.max", "w") as fh:
                fh.write(f"{quota} {_PERIOD_US}")
            self.usage_file = f"{folder}/cpu.stat"
            return
        cpu, acct = f"/sys/fs/cgroup/cpu/{name}", f"/sys/fs/cgroup/cpuacct/{name}"
        for folder in (cpu, acct):
            if not os.path.isdir(folder):
                os.mkdir(folder)
            self.folders.append(folder)
        with open(f"{cpu}/cpu.cfs_period_us", "w") as fh:
            fh.write(str(_PERIOD_US))
        with open(f"{cpu}/cpu.cfs_quota_us", "w") as fh:
            fh.write(str(quota))
        self.usage_file = f"{acct}/cpuacct.usage"

    def add(self, pid: int) -> None:
        """Move a process (and the threads and children it starts from now on) into the group."""
        for folder in self.folders:
            with open(f"{folder}/cgroup.procs", "w") as fh:
                fh.write(str(pid))

    def remove(self) -> None:
        """Delete the group (its processes must have ended)."""
        for folder in self.folders:
            with contextlib.suppress(OSError):
                os.rmdir(folder)


def cpu_seconds(usage_file: str) -> float:
    """CPU seconds a budget's processes used so far (0.0 without a budget)."""
    if not usage_file:
        return 0.0
    with open(usage_file) as fh:
        text = fh.read()
    if usage_file.endswith("cpu.stat"):
        line = next(x for x in text.splitlines() if x.startswith("usage_usec"))
        return int(line.split()[1]) / 1e6
    return int(text) / 1e9


@dataclasses.dataclass
class Stores:
    """The running stand-ins: what a reader's process needs to reach them."""

    gcs_bucket: str
    s3_bucket: str
    tensorflow_env: dict[str, str]
    s3_env: dict[str, str]
    gcs_delay_file: str
    s3_delay_file: str
    budget: CpuBudget
    #: For this process's uploads: around the relays (GCS through its batch shim, S3 direct).
    upload_env: dict[str, str]

    def child_env(self) -> dict[str, str]:
        """The environment of a reader's process: TensorFlow to the GCS, boto3 to the S3."""
        return {**self.tensorflow_env, **self.s3_env}


def _relay(target: tuple[str, int], connect: bool, delay_file: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "fakes.delayproxy", "--target", f"{target[0]}:{target[1]}"]
    command += ["--delay-file", delay_file] + (["--connect"] if connect else [])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env, cwd=TESTS)
    assert process.stdout is not None
    process.port = int(process.stdout.readline())  # type: ignore[attr-defined]
    return process


@contextlib.contextmanager
def stores(folder: str, server_cpus: float) -> Iterator[Stores]:
    """Both stand-ins under ``folder``, their servers and relays in one CPU budget."""
    if TESTS not in sys.path:
        sys.path.insert(0, TESTS)
    from fakes.delayproxy import SharedDelay
    from fakes.gcs_tls import local_gcs
    from realparts.seaweedfs import seaweedfs

    budget = CpuBudget(server_cpus, f"tfrs-bench-{os.getpid()}")
    relays: list[subprocess.Popen] = []
    try:
        with (
            local_gcs(os.path.join(folder, "gcs")) as gcs,
            seaweedfs(os.path.join(folder, "s3")) as s3,
        ):
            delays = [os.path.join(folder, f"{n}.delay") for n in ("gcs", "s3")]
            for path in delays:
                SharedDelay(path).close()
            relays.append(_relay(("127.0.0.1", gcs.https_port), True, delays[0]))
            s3_port = int(s3.endpoint.rsplit(":", 1)[1])
            relays.append(_relay(("127.0.0.1", s3_port), False, delays[1]))
            for pid in (gcs.process.pid, s3.process.pid, *(r.pid for r in relays)):
                budget.add(pid)
            gcs_relay, s3_relay = (f"http://127.0.0.1:{r.port}" for r in relays)  # type: ignore[attr-defined]
            yield Stores(
                gcs_bucket=gcs.create_bucket("bench"),
                s3_bucket=s3.create_bucket("bench"),
                tensorflow_env=gcs.tensorflow_env(gcs_relay),
                s3_env={**s3.env(), "AWS_ENDPOINT_URL": s3_relay},
                gcs_delay_file=delays[0],
                s3_delay_file=delays[1],
                budget=budget,
                upload_env={**gcs.python_env(), **s3.env()},
            )
    finally:
        for relay in relays:
            relay.terminate()
            relay.wait(timeout=10)
        time.sleep(0.2)
        budget.remove()
