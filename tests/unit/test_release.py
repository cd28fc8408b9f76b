"""The release workflow (.github/workflows/release.yml) pushes exactly the images the committed
pipelines and components name, tagged with the package version, and attaches those files
compiled for the images it pushed. Its registry step runs here for real (bash).

The retraining workflow (.github/workflows/retrain.yml) compiles with the release of the tag
k8s/images deploys, the tag and the image read once: its steps that read k8s/images and install
the release run here for real (bash, git; pip stood in for by a script that logs its calls)."""

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
RETRAIN = os.path.join(ROOT, ".github", "workflows", "retrain.yml")


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


def _retrain_steps() -> list[dict]:
    with open(RETRAIN) as fh:
        return yaml.safe_load(fh)["jobs"]["retrain"]["steps"]


def _named(steps: list[dict], name: str) -> tuple[int, dict]:
    (found,) = [(i, s) for i, s in enumerate(steps) if s.get("name") == name]
    return found


def test_retraining_installs_the_release_of_the_tag_it_reads_with_the_image():
    """One step reads k8s/images (the package's own reader), and both the release installed and
    the image compiled for come from its outputs: the two cannot drift apart."""
    steps = _retrain_steps()
    (checkout,) = [s for s in steps if s.get("uses", "").startswith("actions/checkout@")]
    assert checkout["with"]["fetch-depth"] == 0  # the tags, or no release is ever found
    read, deployed = _named(steps, "Deployed images")
    assert deployed["id"] == "deployed"
    assert deployed["run"].count("--kustomization k8s/images") == 2
    install, release = _named(steps, "Install the release of the deployed tag")
    assert release["env"] == {"TAG": "${{ steps.deployed.outputs.tag }}"}
    assert '"v$TAG"' in release["run"] and "pip install" in release["run"]
    compile_, retrain = _named(steps, "Retrain what the cluster deploys")
    assert retrain["env"]["IMAGE"] == "${{ steps.deployed.outputs.image }}"
    assert '--image "$IMAGE"' in retrain["run"] and "images list" not in retrain["run"]
    assert read < install < compile_
    # nothing installs the checkout's package again once the release is in
    assert not any("pip" in s.get("run", "") for s in steps[install + 1 :])


def _bash(script: str, cwd, **env: str) -> subprocess.CompletedProcess:
    """``script`` as a workflow step runs it (bash -e), the package's environment on PATH."""
    path = os.pathsep.join([*env.pop("PATH", "").split(os.pathsep), os.path.dirname(sys.executable),
                            os.environ["PATH"]])  # fmt: skip
    return subprocess.run(["bash", "-e", "-c", script], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **env, "PATH": path.lstrip(os.pathsep)})  # fmt: skip


def test_the_deployed_images_step_reads_the_image_and_its_tag(tmp_path):
    (tmp_path / "k8s" / "images").mkdir(parents=True)
    text = open(os.path.join(ROOT, "k8s", "images", "kustomization.yaml")).read()
    text = re.sub(r"newTag: .*", "newTag: 2026.11", text).replace(
        "newName: ghcr.io/tfrecord-suite/", "newName: europe-docker.pkg.dev/p/ml/"
    )
    (tmp_path / "k8s" / "images" / "kustomization.yaml").write_text(text)
    out = tmp_path / "github_output"
    out.write_text("")
    proc = _bash(_named(_retrain_steps(), "Deployed images")[1]["run"], tmp_path,
                 GITHUB_OUTPUT=str(out))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert dict(line.split("=", 1) for line in out.read_text().split()) == {
        "image": "europe-docker.pkg.dev/p/ml/tfrecord-suite:2026.11",
        "tag": "2026.11",
    }


def _checkout(root, release_tags: list[str]):
    """A checkout as actions/checkout leaves it with every tag: a commit tagged with each of
    ``release_tags``, then a later one on top (the branch CI runs on)."""
    root.mkdir(parents=True)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}  # fmt: skip

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True)

    git("init", "-q")
    (root / "constraints.txt").write_text("the release's pins\n")
    git("add", "constraints.txt")
    git("commit", "-q", "-m", "release")
    for tag in release_tags:
        git("tag", f"v{tag}")
    (root / "constraints.txt").write_text("the branch's pins\n")
    git("commit", "-q", "-am", "later")


def _install(tmp_path, tag: str, release_tags: list[str]):
    """The install step for a deployed ``tag``: its outcome and the pip calls it made."""
    checkout = tmp_path / "checkout"
    _checkout(checkout, release_tags)
    fake = tmp_path / "bin"
    fake.mkdir(parents=True)
    (fake / "pip").write_text('#!/bin/sh\necho "$*" >> "$PIP_LOG"\n')
    (fake / "pip").chmod(0o755)
    log = tmp_path / "pip.log"
    log.write_text("")
    runner_temp = tmp_path / "runner-temp"
    runner_temp.mkdir()
    step = _named(_retrain_steps(), "Install the release of the deployed tag")[1]
    proc = _bash(step["run"], checkout, TAG=tag, PATH=str(fake), PIP_LOG=str(log),
                 RUNNER_TEMP=str(runner_temp))  # fmt: skip
    return proc, log.read_text().splitlines(), runner_temp / "release"


def test_the_release_of_the_deployed_tag_is_installed_from_its_git_tag(tmp_path):
    proc, pip, release = _install(tmp_path, __version__, [__version__])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert pip == ["uninstall -y tfrecord-suite",
                   f"install -c {release}/constraints.txt {release}[gcs]"]  # fmt: skip
    assert (release / "constraints.txt").read_text() == "the release's pins\n"
    assert f"compiling with tfrecord-suite {__version__} from release v{__version__}" in proc.stdout


def test_without_a_release_the_checkout_compiles_only_if_it_is_the_deployed_version(tmp_path):
    proc, pip, _ = _install(tmp_path / "same", __version__, [])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert pip == [] and f"from this checkout (no release v{__version__})" in proc.stdout
    proc, pip, _ = _install(tmp_path / "other", "9.9.9", [__version__])
    assert proc.returncode == 1 and pip == []
    assert proc.stdout.strip() == (
        "::error::k8s/images deploys images tagged 9.9.9, but this checkout (no release v9.9.9) "
        f"is tfrecord-suite {__version__}: set k8s/images to a released tag, or release v9.9.9"
    )


def test_a_release_whose_package_is_not_the_deployed_tag_fails(tmp_path):
    """A tag pushed by hand, not by the release workflow (which refuses a tag that is not the
    package version): what it installs is checked, not trusted."""
    proc, pip, _ = _install(tmp_path, "9.9.9", ["9.9.9"])  # the package stays __version__
    assert proc.returncode == 1 and len(pip) == 2
    assert f"but release v9.9.9 is tfrecord-suite {__version__}" in proc.stdout
