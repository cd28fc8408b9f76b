"""The Python face of the components: `from tfrecord_suite.components import shard` on the default
images, `build(...)` on a registry of one's own, `configure(task, name)` for the ready
pipelines' settings."""

import pytest
import yaml


def _executors(path):
    with open(path) as fh:
        return next(yaml.safe_load_all(fh))["deploymentSpec"]["executors"]


def test_default_images_and_a_registry_of_ones_own(tmp_path):
    from kfp import compiler, dsl

    from tfrecord_suite.components import build, configure, shard

    mine = build(image_registry="europe-docker.pkg.dev/acme/ml", image_tag="7")

    @dsl.pipeline
    def mixed(input_uri: str, registry_root: str):
        staged = configure(
            shard(input_uri=input_uri, registry_root=registry_root, dataset_name="rows"), "shard"
        )
        mine.version(
            staged=staged.outputs["staged"], registry_root=registry_root, dataset_name="rows"
        )

    compiler.Compiler().compile(mixed, str(tmp_path / "p.yaml"))
    images = {n: e["container"]["image"] for n, e in _executors(tmp_path / "p.yaml").items()}
    assert images == {
        "exec-shard": "ghcr.io/tfrecord-suite/tfrecord-suite:0.1.0",
        "exec-version": "europe-docker.pkg.dev/acme/ml/tfrecord-suite:7",
    }
    with open(tmp_path / "p.yaml") as fh:
        docs = list(yaml.safe_load_all(fh))
    task = docs[0]["root"]["dag"]["tasks"]["shard"]
    assert task["retryPolicy"]["maxRetryCount"] == 2  # configure: the ready pipelines' policy
    env = docs[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]["exec-shard"]
    assert {e["name"] for e in env["fieldPathAsEnv"]} >= {"TFRS_RUN_ID", "TFRS_POD_UID"}


def test_every_component_is_importable_and_unknown_names_are_not():
    import tfrecord_suite.components as components
    from tfrecord_suite.kfp.components import COMPONENTS

    for name in COMPONENTS:
        assert getattr(components, name).name == name.replace("_", "-")
    with pytest.raises(AttributeError):
        components.shard_op  # noqa: B018


def test_an_image_names_its_set_and_a_step_starts_images_from_its_own(monkeypatch):
    from tfrecord_suite.images import GPU_RESOURCE, IMAGE_ENV, ImageSet
    from tfrecord_suite.steps import running_images

    mine = ImageSet("localhost:5000/team", "t1")
    for key in ("component", "trainer-gpu", "beam-worker"):
        assert ImageSet.find(mine.image(key)) == mine
    assert ImageSet.find("europe-docker.pkg.dev/acme/ml/my-trainer:3") is None  # not one of ours
    assert ImageSet.find("tfrecord-suite:1") is None  # no registry
    monkeypatch.setenv(IMAGE_ENV, mine.component)
    assert running_images().trainer(GPU_RESOURCE) == "localhost:5000/team/tfrecord-suite-gpu:t1"
    monkeypatch.setenv(IMAGE_ENV, "europe-docker.pkg.dev/acme/ml/my-trainer:3")
    assert running_images() == ImageSet()


def test_a_built_component_tells_its_step_its_image_and_a_task_setting_wins(tmp_path):
    """build(R, T) reaches what the step starts: the compiled command exports the image it was
    built for, unless the task sets it (the ready pipelines do, per placement)."""
    import subprocess

    from tfrecord_suite.components import build
    from tfrecord_suite.images import IMAGE_ENV

    command = build("localhost:5000/team", "t1").train.component_spec.implementation.container
    script = command.command[2].split("if ! ", 1)[0]
    assert script.startswith("export ")
    probe = f'{script}\necho "${IMAGE_ENV}"'
    out = subprocess.run(["sh", "-ec", probe], capture_output=True, text=True, env={})
    assert out.stdout.strip() == "localhost:5000/team/tfrecord-suite:t1"
    env = {IMAGE_ENV: "localhost:5000/team/tfrecord-suite-gpu:t1"}
    out = subprocess.run(["sh", "-ec", probe], capture_output=True, text=True, env=env)
    assert out.stdout.strip() == env[IMAGE_ENV]


def test_configure_keeps_the_image_set_a_component_was_built_for(tmp_path):
    """configure(task, name) on a task of build(R, T) records R/...:T, and the train step's
    launched pods start from R/...:T too (it put the default image back over it)."""
    from kfp import compiler, dsl

    from tfrecord_suite.components import build, configure
    from tfrecord_suite.images import IMAGE_ENV

    mine = build("localhost:5000/team", "t1")

    @dsl.pipeline
    def p(input_uri: str, registry_root: str, ref: str, digest: str):
        configure(mine.shard(input_uri=input_uri, registry_root=registry_root,
                             dataset_name="rows"), "shard")  # fmt: skip
        configure(mine.train(dataset_ref=ref, dataset_digest=digest), "train")

    compiler.Compiler().compile(p, str(tmp_path / "p.yaml"))
    executors = _executors(tmp_path / "p.yaml")
    for name, image in (("exec-shard", "tfrecord-suite:t1"), ("exec-train", "tfrecord-suite:t1")):
        container = executors[name]["container"]
        assert container["image"] == f"localhost:5000/team/{image}"
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env[IMAGE_ENV] == f"localhost:5000/team/{image}", name


@pytest.mark.slow
def test_a_step_of_a_built_component_records_the_image_it_was_built_for(tmp_path, penguins_csv):
    """The version step of build(R, T) writes R/tfrecord-suite:T into the manifest it publishes
    (the same image set its train step starts nodes and tf.data service workers from)."""
    import json

    from kfp import dsl, local
    from kfp.local import config

    from tfrecord_suite.components import build

    ops = build(image_registry="localhost:5000/team", image_tag="t1")
    registry = str(tmp_path / "registry")

    @dsl.pipeline
    def data(input_uri: str, registry_root: str) -> str:
        staged = ops.shard(input_uri=input_uri, registry_root=registry_root, dataset_name="p")
        published = ops.version(
            staged=staged.outputs["staged"], registry_root=registry_root, dataset_name="p"
        )
        return published.outputs["ref"]

    before = config.LocalExecutionConfig.instance
    local.init(local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path / "root"))
    try:
        ref = data(input_uri=penguins_csv, registry_root=registry).output
    finally:
        config.LocalExecutionConfig.instance = before
    assert ref == f"{registry}/p@1.0.0"
    with open(tmp_path / "registry" / "p" / "1.0.0" / "manifest.json") as fh:
        assert json.load(fh)["producer"]["image"] == "localhost:5000/team/tfrecord-suite:t1"
