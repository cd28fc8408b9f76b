"""The cluster's own images, made here (no registry is reachable) and loaded into its containerd.

The system images (pause, CoreDNS, JobSet, the Trainer's controller manager) hold one static
binary that build.sh built from its published source, in an image ``FROM scratch`` laid out as
the upstream images are (``gcr.io/distroless/static:nonroot``: ``/tmp``, a ``nonroot`` user
65532), and carry the upstream names, so the upstream manifests apply with their own image
references. podman builds them; ``podman save | ctr import`` loads them, and the suite's images
(built by ``tfrecord-suite images build``), into containerd's ``k8s.io`` namespace, where the
kubelet finds them: nothing is ever pulled.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

NONROOT = "65532"
_PASSWD = "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
_GROUP = "root:x:0:\nnonroot:x:65532:\n"


def podman(*args: str, timeout: float = 1800, stdout: int | None = None) -> str:
    """Run podman (runc, cgroupfs: the suite's containers.conf); its stdout, or raise."""
    from fakes.podman_harness import podman_env

    proc = subprocess.run(
        ["podman", *args],
        env=podman_env(),
        stdout=subprocess.PIPE if stdout is None else stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args[:3])} failed: {proc.stderr[-3000:]}")
    return proc.stdout or ""


def exists(image: str) -> bool:
    """Whether podman's storage holds ``image``."""
    from fakes.podman_harness import podman_env

    return (
        subprocess.run(
            ["podman", "image", "exists", image], env=podman_env(), capture_output=True
        ).returncode
        == 0
    )


def image_id(image: str) -> str:
    """podman's ID of ``image``."""
    return podman("image", "inspect", "--format", "{{.Id}}", image).strip()


def build_static(image: str, binary: Path, path: str, user: str = NONROOT) -> None:
    """Build ``image``: ``binary`` at ``path`` of an otherwise empty image, run as ``user``."""
    with tempfile.TemporaryDirectory(prefix="tfrs-image-") as tmp:
        context = Path(tmp)
        rootfs = context / "rootfs"
        target = rootfs / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(binary, target)
        (rootfs / "tmp").mkdir(mode=0o1777, exist_ok=True)
        (rootfs / "tmp").chmod(0o1777)
        (rootfs / "etc").mkdir(exist_ok=True)
        (rootfs / "etc" / "passwd").write_text(_PASSWD)
        (rootfs / "etc" / "group").write_text(_GROUP)
        (context / "Containerfile").write_text(
            f'FROM scratch\nCOPY rootfs/ /\nUSER {user}:{user}\nENTRYPOINT ["{path}"]\n'
        )
        podman("build", "--network", "none", "-t", image, str(context), timeout=600)


def load(images: list[str], ctr: Path, address: Path) -> None:
    """``podman save`` each image into containerd's ``k8s.io`` namespace (``ctr import``)."""
    from fakes.podman_harness import podman_env

    for image in images:
        save = subprocess.Popen(
            ["podman", "save", "--format", "docker-archive", image],
            env=podman_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        imported = subprocess.run(
            [str(ctr), "--address", str(address), "--namespace", "k8s.io", "images", "import", "-"],
            stdin=save.stdout,
            capture_output=True,
            text=True,
        )  # fmt: skip
        assert save.stdout is not None
        save.stdout.close()
        save_err = save.communicate()[1].decode(errors="replace")
        if save.returncode != 0 or imported.returncode != 0:
            raise RuntimeError(
                f"loading {image} into containerd failed: {save_err[-2000:]}"
                f"{imported.stderr[-2000:]}"
            )


def loaded(ctr: Path, address: Path) -> set[str]:
    """The image names containerd's ``k8s.io`` namespace holds."""
    out = subprocess.run(
        [str(ctr), "--address", str(address), "--namespace", "k8s.io", "images", "list", "-q"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return set(out.split())


PROBE_SOURCE = Path(__file__).resolve().parent / "probe"


def probe_image() -> str:
    """The network probe's image name (tests/cluster/probe; tagged with its source's digest)."""
    import hashlib

    digest = hashlib.sha256()
    for path in sorted(PROBE_SOURCE.glob("*")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return f"localhost/tfrs-cluster-probe:{digest.hexdigest()[:12]}"


def build_probe() -> str:
    """Build the probe (static, standard library only) and its image, where podman lacks it."""
    import os

    image = probe_image()
    if exists(image):
        return image
    with tempfile.TemporaryDirectory(prefix="tfrs-probe-") as tmp:
        binary = Path(tmp) / "probe"
        subprocess.run(
            ["go", "build", "-trimpath", "-ldflags=-s -w", "-o", str(binary), "."],
            cwd=PROBE_SOURCE,
            check=True,
            env={**os.environ, "CGO_ENABLED": "0", "GOTOOLCHAIN": "local", "GOFLAGS": ""},
        )
        build_static(image, binary, "/probe")
    return image


def suite_image(key: str = "component") -> str:
    """The suite's image ``key`` (images.py) built from this checkout by ``tfrecord-suite images
    build`` against podman's Docker API, on the stand-in base (minutes the first time; a code
    change rebuilds only the layers of the sources)."""
    import json
    import sys

    from fakes.podman_harness import ensure_python_base, podman_env, podman_service
    from tfrecord_suite import images as suite_images

    ensure_python_base()
    image = suite_images.DEFAULT_IMAGES.image(key)
    before = image_id(image) if exists(image) else ""
    with tempfile.TemporaryDirectory(prefix="tfrs-podman-") as tmp, podman_service(tmp) as url:
        proc = subprocess.run(
            [sys.executable, "-m", "tfrecord_suite.cli", "images", "build", "--only", key,
             "--docker-host", url, "--json"],
            capture_output=True, text=True, timeout=3600,
        )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"building the {key} image failed: {proc.stderr[-3000:]}")
    (built,) = json.loads(proc.stdout)
    # the build it replaced would stay behind untagged (gigabytes each time the code changes)
    if before and before != image_id(built["image"]):
        subprocess.run(["podman", "rmi", before], env=podman_env(), capture_output=True)
    return built["image"]
