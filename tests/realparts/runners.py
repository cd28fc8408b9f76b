"""Beam's runners beyond the in-process one, for the ``runners`` tests and the bench.

Each is built from its published sources by ``build.sh`` at the versions ``versions.env`` pins,
into the cache :mod:`.parts` finds: Prism from Beam's Go module, the Flink and Spark job
servers from Maven Central. :func:`runner_args` gives the Beam options that run the shard step on
one of them, starting a job server once for as long as the caller's ``ExitStack`` lives.

* ``in_process``: Beam's FnApiRunner in this process (what the step runs on with no runner named);
* ``prism``: Beam's Go runner, started by the SDK from the binary given as ``--prism_location``;
* ``flink``: Beam's Flink job server with an embedded Flink cluster, parallelism 2;
* ``spark``: Beam's Spark job server with an embedded Spark (``local[2]``).

The Python code of the pipeline runs in this process on every one of them (``LOOPBACK``), so
they read and write this machine's disk.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from realparts import parts
from realparts.processes import free_port, wait_for

RUNNERS = ("in_process", "prism", "flink", "spark")
#: The parts build.sh builds for them.
PARTS = ("prism", "flink", "spark")
#: Parallelism of the embedded Flink and Spark clusters (the machine has 2 cores).
PARALLELISM = 2
#: Heap of a job server's JVM: the embedded cluster runs inside it; the Python work does not.
JOB_SERVER_HEAP = "-Xmx1g"
#: Each job server's flags besides the ports: the embedded cluster.
_CLUSTER_FLAGS = {
    "flink": ["--flink-master=[local]"],
    "spark": [f"--spark-master-url=local[{PARALLELISM}]"],
}
#: JVM properties: Spark's driver on the loopback interface and no web UI (SparkConf reads
#: ``spark.*`` system properties).
_JVM_PROPERTIES = {
    "flink": [],
    "spark": ["-Dspark.driver.bindAddress=127.0.0.1", "-Dspark.driver.host=localhost",
              "-Dspark.ui.enabled=false"],
}  # fmt: skip


def prism_binary(find: Callable[[str], Path | None] = parts.build) -> Path:
    """The prism binary build.sh built."""
    return find("prism") / "bin" / "prism"


def job_server_jar(kind: str, find: Callable[[str], Path | None] = parts.build) -> Path:
    """The launcher jar of the ``flink`` or ``spark`` job server build.sh assembled."""
    return find(kind) / "job-server.jar"


@dataclasses.dataclass
class JobServer:
    """A Beam job server started from a launcher jar build.sh wrote.

    Attributes:
        kind: ``flink`` or ``spark``.
        port: Its job service port on 127.0.0.1.
        process: The JVM.
        log: Its output (kept for a failure's message).

    """

    kind: str
    port: int
    process: subprocess.Popen
    log: str

    @property
    def endpoint(self) -> str:
        """The ``--job_endpoint`` to submit to."""
        return f"localhost:{self.port}"

    def log_tail(self) -> str:
        """The last lines of its output."""
        with open(self.log, errors="replace") as fh:
            return "".join(fh.readlines()[-30:])


@contextlib.contextmanager
def job_server(kind: str, timeout: float = 180.0) -> Iterator[JobServer]:
    """Start the ``kind`` job server on a free loopback port; stop it on exit."""
    jar = job_server_jar(kind)
    port = free_port()
    with tempfile.TemporaryDirectory(prefix=f"tfrs-{kind}-job-server-") as folder:
        log = os.path.join(folder, "job-server.log")
        command = [
            "java", JOB_SERVER_HEAP, *_JVM_PROPERTIES[kind], "-jar", str(jar), *_CLUSTER_FLAGS[kind],
            "--job-host=localhost", f"--job-port={port}", "--artifact-port=0",
            "--expansion-port=0", f"--artifacts-dir={os.path.join(folder, 'artifacts')}",
        ]  # fmt: skip
        with open(log, "wb") as out:
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        server = JobServer(kind, port, process, log)
        try:
            _wait_for_port(server, timeout)
            yield server
        finally:
            process.terminate()
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_for_port(server: JobServer, timeout: float) -> None:
    def listens() -> bool:
        with socket.create_connection(("127.0.0.1", server.port), 1):
            return True

    wait_for(
        listens,
        timeout,
        f"the {server.kind} job server's port",
        alive=lambda: server.process.poll() is None,
        log=server.log_tail,
    )


def runner_args(name: str, stack: contextlib.ExitStack) -> list[str]:
    """The Beam options that run the shard step on runner ``name`` (one of :data:`RUNNERS`).

    A job server it needs is started and entered into ``stack``, which stops it.
    """
    if name == "in_process":
        return ["--runner=FnApiRunner"]
    if name == "prism":
        return ["--runner=PrismRunner", f"--prism_location={prism_binary()}"]
    if name in _CLUSTER_FLAGS:
        server = stack.enter_context(job_server(name))
        args = [f"--runner={name.title()}Runner", f"--job_endpoint={server.endpoint}"]
        args += ["--environment_type=LOOPBACK"]
        return args + ([f"--parallelism={PARALLELISM}"] if name == "flink" else [])
    raise ValueError(f"unknown runner {name!r}: use one of {', '.join(RUNNERS)}")
