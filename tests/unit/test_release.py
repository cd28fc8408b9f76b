"""The release workflow (.github/workflows/release.yml) pushes exactly the images the committed
pipelines and components name, tagged with the package version, and attaches those files
compiled for the images it pushed. Its registry step runs here for real (bash)."""

import glob
import os
import re
import subprocess
import sys

import yaml

from tfrecord_suite import __version__, images
from tfrecord_suite.kfp import catalog

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKFLOW = os.path.join(ROOT, ".github", "workflows", "release.yml")


def _steps():
    with open(WORKFLOW) as fh:
        flow = yaml.safe_load(fh)
    # PyYAML reads the key `on` as True
    assert flow[True]["push"]["tags"] == ["v*"]
    return {s.get("name", s.get("uses", "")): s for s in flow["jobs"]["images"]["steps"]}


def _registry_step(tmp_path, ref_name, owner="tfrecord-suite", registry=""):
    out = tmp_path / "github_output"
    out.write_text("")
    # `python` is the one the package is installed in, as after the workflow's pip install
    path = os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]
    env = {**os.environ, "PATH": path, "GITHUB_REF_NAME": ref_name, "OWNER": owner,
           "IMAGE_REGISTRY": registry, "GITHUB_OUTPUT": str(out)}  # fmt: skip
    proc = subprocess.run(
        ["bash", "-e", "-c", _steps()["Registry and tag"]["run"]],
        env=env, capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    return proc, dict(line.split("=", 1) for line in out.read_text().split())


def test_the_registry_step_names_what_compiled_files_name(tmp_path):
    proc, outputs = _registry_step(tmp_path, f"v{__version__}")
    assert proc.returncode == 0, proc.stderr
    # this repository's owner: the default registry of images.py, so the committed files
    assert outputs == {"registry": images.DEFAULT_REGISTRY, "tag": images.DEFAULT_TAG}
    dockerfile = open(os.path.join(ROOT, "containers", "Dockerfile")).read()
    source = re.search(r'image.source="https://github.com/([^/]+)/', dockerfile)[1]
    assert f"ghcr.io/{source.lower()}" == images.DEFAULT_REGISTRY
    # a fork (capitals in its owner) or a registry of one's own
    _, fork = _registry_step(tmp_path, f"v{__version__}", owner="Acme-ML")
    assert fork["registry"] == "ghcr.io/acme-ml"
    _, own = _registry_step(tmp_path, f"v{__version__}", registry="europe-docker.pkg.dev/p/ml")
    assert own["registry"] == "europe-docker.pkg.dev/p/ml"


def test_a_tag_that_is_not_the_package_version_is_refused(tmp_path):
    proc, _ = _registry_step(tmp_path, "v9.9.9")
    assert proc.returncode != 0 and "is not the package version" in proc.stderr


def test_every_image_the_committed_files_name_is_built_and_pushed():
    steps = _steps()
    build = steps["Build and push every image"]["run"]
    assert "tfrecord-suite images build --push" in build and "--only" not in build
    assert "steps.names.outputs.registry" in build and "steps.names.outputs.tag" in build
    release = steps["Compile the pipelines and components for these images"]["run"]
    assert "make release-files" in release
    built = {ref for ref, _ in images.ALL_IMAGES.values()}
    named = set()
    components = glob.glob(os.path.join(ROOT, "components", "*", "*", "component.*"))
    assert len(components) == 2 * len(catalog.CATEGORIES)  # component.yaml and component.py
    for path in glob.glob(os.path.join(ROOT, "pipelines", "*.yaml")) + components:
        text = open(path).read()
        named |= set(re.findall(r"ghcr\.io/[\w./-]+:[\w.-]+", text))
    assert named and named <= built, named - built
