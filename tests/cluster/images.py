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

import hashlib
import json
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

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
    build_rootfs(image, {path: binary}, user, entrypoint=[path])


#: Where BusyBox comes from (Debian's busybox-static, installed by ``make cluster-deps``)
BUSYBOX = Path("/bin/busybox")


#: The label holding the digest of what an image was built from (:func:`build_rootfs`)
INPUTS_LABEL = "org.tfrecord-suite.inputs"


def build_rootfs(
    image: str,
    files: dict[str, Path],
    user: str = NONROOT,
    entrypoint: list[str] | None = None,
    cmd: list[str] | None = None,
    env: dict[str, str] | None = None,
    busybox: bool = False,
    workdir: str = "/",
) -> None:
    """Build ``image`` from scratch: ``files`` (image path -> file or folder here), ``/tmp``,
    ``/etc/passwd`` and ``/etc/group`` as distroless has them, run as ``user``; unless podman
    holds it built from the same files and settings already.

    With ``busybox``, BusyBox's shell and tools in ``/bin`` as an Alpine image has them (the
    upstream images of Kubeflow Pipelines' Go parts are Alpine with the binary added).
    """
    lines = ["FROM scratch", "COPY rootfs/ /"]
    lines += [f"ENV {key}={json.dumps(value)}" for key, value in (env or {}).items()]
    if busybox:
        lines.append('ENV PATH="/bin:/usr/bin:/sbin:/usr/sbin"')
    lines += [f"WORKDIR {workdir}", f"USER {user}:{user}"]
    if entrypoint:
        lines.append(f"ENTRYPOINT {json.dumps(entrypoint)}")
    if cmd:
        lines.append(f"CMD {json.dumps(cmd)}")
    sources = [*files.values(), *([BUSYBOX] if busybox else [])]
    inputs = content_tag(*sources, text="\n".join([*lines, *files]))
    if exists(image) and label(image, INPUTS_LABEL) == inputs:
        return
    lines.append(f"LABEL {INPUTS_LABEL}={inputs}")
    with tempfile.TemporaryDirectory(prefix="tfrs-image-") as tmp:
        context = Path(tmp)
        rootfs = context / "rootfs"
        for path, source in files.items():
            target = rootfs / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():
                shutil.copytree(source, target, symlinks=True)
            else:
                shutil.copy2(source, target)
        if busybox:
            _add_busybox(rootfs / "bin")
        (rootfs / "tmp").mkdir(mode=0o1777, exist_ok=True)
        (rootfs / "tmp").chmod(0o1777)
        (rootfs / "etc").mkdir(exist_ok=True)
        (rootfs / "etc" / "passwd").write_text(_PASSWD)
        (rootfs / "etc" / "group").write_text(_GROUP)
        (context / "Containerfile").write_text("\n".join(lines) + "\n")
        podman("build", "--network", "none", "-t", image, str(context), timeout=600)


def label(image: str, name: str) -> str:
    """The value of label ``name`` of ``image`` in podman's storage ('' where it has none)."""
    labels = json.loads(podman("image", "inspect", "--format", "{{json .Labels}}", image))
    return (labels or {}).get(name, "")


def _add_busybox(folder: Path) -> None:
    """BusyBox at ``folder/busybox`` with a link for each of its applets."""
    if not BUSYBOX.exists():
        raise RuntimeError(f"{BUSYBOX} is missing: apt-get install busybox-static")
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy2(BUSYBOX, folder / "busybox")
    applets = subprocess.run([str(BUSYBOX), "--list"], check=True, capture_output=True,
                             text=True).stdout.split()  # fmt: skip
    for applet in applets:
        if not (folder / applet).exists():
            (folder / applet).symlink_to("busybox")


def build_containerfile(image: str, context: Path, containerfile: Path | None = None) -> None:
    """``podman build`` of a Containerfile (its folder is the context by default), with the
    network the Debian mirror and PyPI are reached through; unless podman holds ``image``
    built from the same Containerfile and folder already. A context given apart from its
    Containerfile (a built part's folder) counts by its Containerfile only."""
    file = containerfile or context / "Containerfile"
    inputs = content_tag(file if containerfile else context)
    if exists(image) and label(image, INPUTS_LABEL) == inputs:
        return
    podman("build", "--network", "host", "--label", f"{INPUTS_LABEL}={inputs}", "-f", str(file),
           "-t", image, str(context), timeout=1800)  # fmt: skip


def content_tag(*sources: Path, text: str = "") -> str:
    """A tag naming what an image is built from: the digest of these files and folders (and of
    ``text``, its settings)."""
    digest = hashlib.sha256(text.encode())
    for source in sources:
        paths = sorted(source.rglob("*")) if source.is_dir() else [source]
        for path in paths:
            if path.is_file() and "__pycache__" not in path.parts:
                digest.update(str(path.relative_to(source.parent)).encode() + b"\0")
                digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def load(images: list[str], ctr: Path, address: Path) -> None:
    """``podman save`` each image into containerd's ``k8s.io`` namespace (``ctr import``), under
    its name, and tag it ``REPO@DIGEST`` too: what a registry's pull by digest leaves in the
    node's store, and what a pod naming ``REPO:TAG@DIGEST`` is resolved to (the kubelet finds the
    image present, pulls nothing, and reports that digest as the pod's ``imageID``)."""
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
        pin(ctr, address, image)


def pin(ctr: Path, address: Path, image: str) -> str:
    """Tag the loaded ``image`` (``REPO:TAG``) ``REPO@DIGEST`` in containerd's ``k8s.io``
    namespace, as a pull by digest leaves it; return the digest (:func:`digest`)."""
    found = digest(ctr, address, image)
    repository = image.rpartition(":")[0] if ":" in image.rpartition("/")[2] else image
    subprocess.run(
        [str(ctr), "--address", str(address), "--namespace", "k8s.io", "images", "tag",
         "--force", image, f"{repository}@{found}"],
        check=True, capture_output=True,
    )  # fmt: skip
    return found


def digest(ctr: Path, address: Path, name: str) -> str:
    """The digest containerd's ``k8s.io`` namespace holds the image ``name`` (``REPO:TAG``) by:
    the one a ``REPO:TAG@DIGEST`` reference resolves to, and the pods' ``imageID`` shows."""
    out = subprocess.run(
        [str(ctr), "--address", str(address), "--namespace", "k8s.io", "images", "list"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    for line in out.splitlines()[1:]:
        ref, _, found, *_ = line.split()
        if ref == name:
            return found
    raise RuntimeError(f"containerd holds no image {name}")


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
    return f"localhost/tfrs-cluster-probe:{content_tag(PROBE_SOURCE)}"


def build_probe() -> str:
    """Build the probe (static, standard library only) and its image, where podman lacks it."""
    image = probe_image()
    if exists(image):
        return image
    with tempfile.TemporaryDirectory(prefix="tfrs-probe-") as tmp:
        build_static(image, go_build(PROBE_SOURCE, ".", Path(tmp) / "probe"), "/probe")
    return image


def go_build(module: Path, package: str, binary: Path, goflags: str = "") -> Path:
    """``go build`` one command of the Go module in ``module`` into ``binary``, static and
    stripped, with the Go installed here (``GOTOOLCHAIN=local``); ``goflags`` as ``GOFLAGS``
    (``-mod=mod``: take what the module's go.mod requires through the module proxy)."""
    import os

    subprocess.run(
        ["go", "build", "-trimpath", "-ldflags=-s -w", "-o", str(binary), package],
        cwd=module,
        check=True,
        env={**os.environ, "CGO_ENABLED": "0", "GOTOOLCHAIN": "local", "GOFLAGS": goflags},
    )
    return binary


def suite_image(key: str = "component", image_set: Any = None) -> str:
    """The suite's image ``key`` (images.py) built from this checkout by ``tfrecord-suite images
    build`` against podman's Docker API, on the stand-in base (minutes the first time; a code
    change rebuilds only the layers of the sources), named as ``image_set`` (an
    ``images.ImageSet``; the defaults where None) names it."""
    import json
    import sys

    from fakes.podman_harness import ensure_python_base, podman_env, podman_service
    from tfrecord_suite import images as suite_images

    ensure_python_base()
    image_set = image_set or suite_images.ImageSet()
    image = image_set.image(key)
    before = image_id(image) if exists(image) else ""
    with tempfile.TemporaryDirectory(prefix="tfrs-podman-") as tmp, podman_service(tmp) as url:
        proc = subprocess.run(
            [sys.executable, "-m", "tfrecord_suite.cli", "images", "build", "--only", key,
             "--image-registry", image_set.registry, "--image-tag", image_set.tag,
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
