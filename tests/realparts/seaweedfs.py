"""A real S3 server for the tests and the bench: SeaweedFS, built from its Go module.

``weed server`` runs a master, a volume server, a filer and the S3 gateway in one process, bound
to 127.0.0.1 on free ports, with one identity (an access key and a secret) allowed everything.
SeaweedFS is what a Kubeflow installation ships as its object store (formerly MinIO). The binary
comes from ``build.sh seaweedfs`` (``make test`` builds it with the other real parts; the version
is pinned in versions.env), cached outside the repository.

Clients reach it the way a Kubeflow step does, through boto3's environment
(:meth:`SeaweedS3.env`: ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

from support import stop_process

from realparts import parts
from realparts.processes import free_ports, log_tail, wait_for

HERE = os.path.dirname(os.path.abspath(__file__))
ACCESS_KEY = "tfrs-test-key"
SECRET_KEY = "tfrs-test-secret"


def weed_binary(build: bool = True) -> str | None:
    """The ``weed`` binary of the pinned version; built (once, minutes) when ``build`` and Go is
    installed, else None when it is missing."""
    folder = str(parts.part_dir("seaweedfs"))
    binary = os.path.join(folder, "bin", "weed")
    if os.path.isfile(os.path.join(folder, ".complete")):
        return binary
    if not build or shutil.which("go") is None:
        return None
    subprocess.run(
        ["bash", os.path.join(HERE, "build.sh"), "seaweedfs"], check=True, stdout=subprocess.DEVNULL
    )
    return binary


@dataclasses.dataclass
class SeaweedS3:
    """A running SeaweedFS: its S3 endpoint and the credentials it accepts."""

    endpoint: str
    folder: str
    process: subprocess.Popen
    log: str

    def env(self) -> dict[str, str]:
        """boto3's environment for this server, as a Kubeflow step gets it from a Secret."""
        return {
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": "us-east-1",
        }

    def create_bucket(self, name: str) -> str:
        """A new bucket; returns ``s3://<name>``."""
        import boto3

        env = self.env()
        client = boto3.session.Session().client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=env["AWS_REGION"],
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
        )
        client.create_bucket(Bucket=name)
        return f"s3://{name}"


def start_command(binary: str, folder: str, ports: dict[str, int]) -> list[str]:
    """``weed server`` with every port given (its gRPC ports would default to port + 10000)."""
    config = os.path.join(folder, "s3.json")
    identity = {
        "name": "tfrs",
        "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
    }
    with open(config, "w") as fh:
        json.dump({"identities": [identity]}, fh)
    data = os.path.join(folder, "data")
    os.makedirs(data, exist_ok=True)
    return [
        binary, "server", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
        f"-master.port={ports['master']}", f"-master.port.grpc={ports['master_grpc']}",
        f"-volume.port={ports['volume']}", f"-volume.port.grpc={ports['volume_grpc']}",
        "-filer", f"-filer.port={ports['filer']}", f"-filer.port.grpc={ports['filer_grpc']}",
        "-s3", f"-s3.port={ports['s3']}", f"-s3.port.grpc={ports['s3_grpc']}",
        "-s3.port.iceberg=0", "-s3.port.lance=0", f"-s3.config={config}",
        # small volumes, and many of them: each bucket is a collection that grows several
        # volumes at once, so the default 30 GB limit and 8 volumes refuse writes after a bucket
        # or two, and -volume.max=0 (counted from the disk's free space) after a few more ("No
        # writable volumes and no free volumes left"); volumes are not preallocated, so the
        # count costs no disk
        "-master.volumeSizeLimitMB=1024", "-volume.max=256", "-volume.preStopSeconds=0",
    ]  # fmt: skip


@contextlib.contextmanager
def seaweedfs(folder: str, binary: str | None = None, timeout: float = 60.0) -> Iterator[SeaweedS3]:
    """SeaweedFS on free loopback ports, its data and log under ``folder``, until the exit."""
    binary = binary or weed_binary()
    if binary is None:
        raise FileNotFoundError("no weed binary: run `make real-parts-s3` (needs Go)")
    os.makedirs(folder, exist_ok=True)
    names = ("master", "master_grpc", "volume", "volume_grpc", "filer", "filer_grpc", "s3")
    ports = dict(zip((*names, "s3_grpc"), free_ports(len(names) + 1), strict=True))
    log = os.path.join(folder, "weed.log")
    with open(log, "wb") as out:
        process = subprocess.Popen(
            start_command(binary, folder, ports), stdout=out, stderr=subprocess.STDOUT
        )
    server = SeaweedS3(f"http://127.0.0.1:{ports['s3']}", folder, process, log)
    try:
        _wait_ready(server, timeout)
        yield server
    finally:
        stop_process(process, timeout=3)


def _wait_ready(server: SeaweedS3, timeout: float) -> None:
    """Until the gateway answers and a volume server has joined (a first write lands)."""
    import boto3

    client = boto3.session.Session().client(
        "s3",
        endpoint_url=server.endpoint,
        region_name="us-east-1",
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
    )

    def writes() -> bool:
        client.create_bucket(Bucket="tfrs-ready")
        client.put_object(Bucket="tfrs-ready", Key="probe", Body=b"ok")
        return True

    wait_for(
        writes,
        timeout,
        "SeaweedFS's first write",
        alive=lambda: server.process.poll() is None,
        log=lambda: log_tail(Path(server.log)),
        interval=0.3,
    )
