"""A real container engine for the `containers` tests: podman's Docker API on a unix socket.

No registry is reachable here, so the bases the Dockerfiles pin are made locally
(containers/standins/) and tagged with the exact names the Dockerfiles use. Images live in
podman's default storage, so a second run reuses the layers of the first.

Where podman cannot run (not installed, not root) the tests skip and say why; under CI
(``CI=true``) that is a failure, because the images must be proven on every submission.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator

import support
from support import stop_process

from realparts.processes import WaitError, wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STANDINS = os.path.join(ROOT, "containers", "standins")
CONTAINERS_CONF = os.path.join(STANDINS, "containers.conf")
PYTHON_BASE = "docker.io/library/python:3.11.11-slim-bookworm"
BEAM_SDK_BASE = "docker.io/apache/beam_python3.11_sdk:2.77.0"


def unavailable(reason: str) -> None:
    """Skip, or fail under CI, where the images must be proven."""
    support.unavailable(f"the containers tests: {reason}")


def podman_env() -> dict[str, str]:
    """The environment podman runs with here (runc, cgroupfs, no default ulimits)."""
    return {**os.environ, "CONTAINERS_CONF": CONTAINERS_CONF}


def podman(*args: str, check: bool = True, timeout: float = 900) -> subprocess.CompletedProcess:
    """Run a podman command with this harness's settings."""
    proc = subprocess.run(
        ["podman", *args], env=podman_env(), capture_output=True, text=True, timeout=timeout
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)} failed: {proc.stderr[-3000:]}")
    return proc


def check_podman() -> None:
    """Skip (or fail under CI) unless rootful podman, runc and debootstrap are here."""
    missing = [exe for exe in ("podman", "runc", "debootstrap") if shutil.which(exe) is None]
    if missing:
        unavailable(f"{', '.join(missing)} not installed (.ci/run installs them from Debian)")
    if os.geteuid() != 0:
        unavailable("rootful podman needs root (the stand-in bases are made with debootstrap)")


@contextlib.contextmanager
def podman_service(workdir: str) -> Iterator[str]:
    """``podman system service`` on a socket in ``workdir``; yields its ``unix://`` URL."""
    sock = os.path.join(workdir, "podman.sock")
    log = open(os.path.join(workdir, "podman-service.log"), "wb")
    proc = subprocess.Popen(
        ["podman", "system", "service", "--time=0", f"unix://{sock}"],
        env=podman_env(),
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    try:
        wait_for(lambda: os.path.exists(sock), 30, "podman system service",
                 alive=lambda: proc.poll() is None, interval=0.1)  # fmt: skip
    except WaitError:
        proc.kill()
        log.close()
        unavailable(
            "podman system service did not start: "
            + open(os.path.join(workdir, "podman-service.log")).read()[-2000:]
        )
    try:
        yield f"unix://{sock}"
    finally:
        stop_process(proc, timeout=15)
        log.close()


def prune_dangling_images() -> None:
    """Free the engine's storage of what earlier builds left: keep tagged images and their layers.

    Each rebuild leaves the previous image and its build layers behind untagged (several GB
    each), and a build that failed or was stopped leaves its working container holding its
    layers. Without this the storage grows with every run on the same machine until the disk
    is full (it reached 62 GB here). Images that a tagged image is built on stay, so unchanged
    layers are still reused.
    """
    import json

    stale = podman("ps", "--all", "--external", "--quiet", check=False).stdout.split()
    if stale:
        podman("rm", "--force", *stale, check=False, timeout=600)
    listed = podman("images", "--all", "--format", "json", check=False).stdout
    images = {i["Id"]: i for i in json.loads(listed or "[]")}
    keep: set[str] = set()
    for image_id, image in images.items():
        if image.get("Names") or image.get("RepoTags"):
            while image_id and image_id not in keep:
                keep.add(image_id)
                image_id = (images.get(image_id) or {}).get("ParentId", "")
    unused = [image_id for image_id in images if image_id not in keep]
    if unused:
        podman("rmi", "--force", *unused, check=False, timeout=600)


def ensure_python_base() -> None:
    """The stand-in for ``python:3.11.11-slim-bookworm`` (debootstrap), made once."""
    if podman("image", "exists", PYTHON_BASE, check=False).returncode == 0:
        return
    proc = subprocess.run(
        ["bash", os.path.join(STANDINS, "make-python-base.sh"), PYTHON_BASE],
        env=podman_env(),
        capture_output=True,
        text=True,
        timeout=1200,
    )
    if proc.returncode != 0:
        raise AssertionError(f"making {PYTHON_BASE} failed:\n{proc.stdout}\n{proc.stderr}")


def ensure_beam_sdk_base() -> None:
    """The stand-in for ``apache/beam_python3.11_sdk:2.77.0``, built on the python stand-in."""
    ensure_python_base()
    if podman("image", "exists", BEAM_SDK_BASE, check=False).returncode == 0:
        return
    podman(
        "build",
        "--network",
        "host",
        "-f",
        os.path.join(STANDINS, "beam-sdk.Dockerfile"),
        "-t",
        BEAM_SDK_BASE,
        STANDINS,
        timeout=1800,
    )


@contextlib.contextmanager
def kfp_docker_runner_on_podman() -> Iterator[None]:
    """Let kfp.local's DockerRunner read a container's exit status on podman.

    kfp runs each step with ``auto_remove=True`` and then asks for its exit status. Docker
    answers 404 for a container already removed, which kfp treats as success; podman answers
    500, which kfp does not expect. Here containers are kept until their status is read, then
    removed, so the real exit status reaches kfp on either engine.
    """
    from docker.models.containers import Container, ContainerCollection

    real_run, real_wait = ContainerCollection.run, Container.wait

    def run(self, image, command=None, stdout=True, stderr=False, remove=False, **kwargs):
        kwargs["auto_remove"] = False
        container = real_run(self, image, command, stdout, stderr, remove, **kwargs)
        container._tfrs_remove_after_wait = True
        return container

    def wait(self, **kwargs):
        status = real_wait(self, **kwargs)
        if getattr(self, "_tfrs_remove_after_wait", False):
            with contextlib.suppress(Exception):
                self.remove(force=True)
        return status

    ContainerCollection.run, Container.wait = run, wait
    try:
        yield
    finally:
        ContainerCollection.run, Container.wait = real_run, real_wait
