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
