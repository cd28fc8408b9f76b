"""Each kfp component run on its own through kfp.local (SubprocessRunner), as kubeflow's
pipelines-components repository tests each component: the compiled component, its executor, its
inputs and outputs, on small real data (the digits images). A component whose inputs are another
component's outputs gets them from that component's own run (module-scoped fixtures), so any one
test runs alone (``-k``) and the whole-DAG test stays in tests/e2e/test_e2e.py."""

import json
import os
import re
from typing import NamedTuple

import pytest

from tfrecord_suite.io import storage
from tfrecord_suite.registry.manifest import Manifest

pytestmark = pytest.mark.e2e
RUN = "components-local-run"


@pytest.fixture(scope="module")
def kfp_local(tmp_path_factory):
    from kfp import local

    from tfrecord_suite.podinfo import RUN_ID_ENV

    # what the downward API tells a step's pod on Kubernetes; the subprocess runner inherits it
    mp = pytest.MonkeyPatch()
    mp.setenv(RUN_ID_ENV, RUN)

    from tfrecord_suite.kfp.components import build_components

    root = tmp_path_factory.mktemp("kfp-components")
    local.init(
        runner=local.SubprocessRunner(use_venv=False),
        pipeline_root=str(root / "pipeline_root"),
        raise_on_error=True,
    )
    yield {"ops": build_components(), "registry": str(root / "registry")}
    mp.undo()


@pytest.fixture(scope="module")
def fingerprint(kfp_local, digits_dir):
    return kfp_local["ops"].fingerprint(input_uri=digits_dir)


@pytest.fixture(scope="module")
def shard(kfp_local, digits_dir, fingerprint):
    return kfp_local["ops"].shard(
        input_uri=digits_dir,
        registry_root=kfp_local["registry"],
        dataset_name="digits",
        fingerprint=fingerprint.output,
        input_format="auto",
        label="",
        key_column="",
        splits="train=80,validation=10,test=10",
        num_shards=0,
        target_shard_mb=128.0,
        readers=1,
        workers=1,
        gzip=False,
        max_bad_fraction=0.01,
        beam_args=[],
    )


def _imported(artifact, cls):
    """Inside a pipeline: an earlier component's output artifact, by its URI and metadata
    (kfp.local takes artifacts only from tasks of the same pipeline)."""
    from kfp import dsl

    return dsl.importer(
        artifact_uri=artifact.uri, artifact_class=cls, metadata=dict(artifact.metadata)
    ).output


@pytest.fixture(scope="module")
def version(kfp_local, shard):
    from kfp import dsl
    from kfp.dsl import Dataset

    ops, staged = kfp_local["ops"], shard.outputs["staged"]
    outputs = NamedTuple("Outputs", [("ref", str), ("digest", str), ("dataset", Dataset)])  # noqa: UP014 - the form kfp documents

    @dsl.pipeline
    def version_alone(registry_root: str) -> outputs:
        task = ops.version(
            staged=_imported(staged, Dataset),
            registry_root=registry_root,
            dataset_name="digits",
            bump="auto",
        )
        return outputs(task.outputs["ref"], task.outputs["digest"], task.outputs["dataset"])

    return version_alone(registry_root=kfp_local["registry"]).outputs


@pytest.fixture(scope="module")
def train(kfp_local, version):
    return kfp_local["ops"].train(
        dataset_ref=version["ref"],
        dataset_digest=version["digest"],
        strategy="auto",
        cpu_devices=1,
        epochs=2,
        batch_size=32,
        learning_rate=0.003,
        model_fn="",
        feature_config="",
        workers=1,
        placement="",
        keep_failed_tfjob=False,
        trainer_image="",
        launcher="auto",
    )


@pytest.fixture(scope="module")
def evaluate(kfp_local, version, train):
    from kfp import dsl
    from kfp.dsl import Dataset, Metrics, Model

    ops, dataset, model = kfp_local["ops"], version["dataset"], train.outputs["model"]
    outputs = NamedTuple("Outputs", [("decision", str), ("evaluation", Metrics)])  # noqa: UP014 - the form kfp documents

    @dsl.pipeline
    def evaluate_alone() -> outputs:
        task = ops.evaluate(
            dataset=_imported(dataset, Dataset),
            model=_imported(model, Model),
            model_registry="",
            model_name="",
            baseline_alias="stable",
            tolerance=0.0,
        )
        return outputs(task.outputs["Output"], task.outputs["evaluation"])

    return evaluate_alone().outputs


@pytest.fixture(scope="module")
def register(kfp_local, version, train, evaluate):
    from kfp import dsl
    from kfp.dsl import Dataset, Metrics, Model

    ops = kfp_local["ops"]
    dataset, model, evaluation = version["dataset"], train.outputs["model"], evaluate["evaluation"]
    outputs = NamedTuple("Outputs", [("number", int), ("registered", Model)])  # noqa: UP014 - the form kfp documents

    @dsl.pipeline
    def register_alone() -> outputs:
        task = ops.register(
            dataset=_imported(dataset, Dataset),
            model=_imported(model, Model),
            evaluation=_imported(evaluation, Metrics),
            model_registry="",
            model_name="",
        )
        return outputs(task.outputs["Output"], task.outputs["registered"])

    return register_alone().outputs


def test_fingerprint_component(fingerprint):
    assert re.fullmatch(r"[0-9a-f]{64}", fingerprint.output)


def test_shard_component_stages_under_the_registry(kfp_local, shard, fingerprint):
    # the shards are written under the registry (publishing then moves no data through the
    # pipeline root); the artifact says where
    staged = shard.outputs["staged"].metadata["staged_uri"]
    assert staged.startswith(os.path.join(kfp_local["registry"], "digits", "_data", "run-"))
    summary = json.loads(storage.read_text(os.path.join(staged, "summary.json")))
    assert summary["records"] > 0 and summary["bad_rows"] == 0
    assert summary["input_fingerprint"]["digest"] == fingerprint.output
    assert "records" in open(shard.outputs["summary"].path).read()


def test_version_component_publishes(kfp_local, version):
    assert version["ref"] == os.path.join(kfp_local["registry"], "digits@1.0.0")
    manifest = Manifest.load(
        storage.read_text(os.path.join(kfp_local["registry"], "digits", "1.0.0", "manifest.json"))
    )
    assert version["digest"] == manifest.content_digest
    assert version["dataset"].metadata["version"] == "1.0.0"


def test_train_component(train, version):
    model = train.outputs["model"]
    assert os.path.isfile(os.path.join(model.path, "export", "saved_model.pb"))
    assert model.metadata["dataset_digest"] == version["digest"]
    assert 0.0 <= train.outputs["metrics"].metadata["test_accuracy"] <= 1.0


def test_evaluate_component_promotes_a_first_model(evaluate):
    # nothing registered yet: no baseline to beat
    assert evaluate["decision"] == "promote"
    assert "accuracy" in json.dumps(evaluate["evaluation"].metadata)


def test_register_component(register):
    assert register["number"] == 1
    assert register["registered"].metadata["version"] == 1


def test_promote_component(kfp_local, register, evaluate):
    from kfp import dsl
    from kfp.dsl import Metrics, Model

    from tfrecord_suite.registry.models import ModelRegistry

    ops, registered, evaluation = kfp_local["ops"], register["registered"], evaluate["evaluation"]

    @dsl.pipeline
    def promote_alone() -> int:
        return ops.promote(
            registered=_imported(registered, Model),
            evaluation=_imported(evaluation, Metrics),
            model_registry="",
            model_name="",
            alias="stable",
        ).output

    assert promote_alone().output == 1
    models = ModelRegistry(os.path.join(kfp_local["registry"], "_models"))
    assert models.alias("digits", "stable") == 1


def test_report_component(version, train, evaluate, register, kfp_local):
    from kfp import dsl
    from kfp.dsl import Dataset, Markdown, Metrics, Model

    ops = kfp_local["ops"]
    dataset, model, metrics = version["dataset"], train.outputs["model"], train.outputs["metrics"]
    evaluation, registered = evaluate["evaluation"], register["registered"]
    outputs = NamedTuple("Outputs", [("text", str), ("summary", Markdown)])  # noqa: UP014 - the form kfp documents

    @dsl.pipeline
    def report_alone() -> outputs:
        task = ops.report(
            dataset=_imported(dataset, Dataset),
            model=_imported(model, Model),
            metrics=_imported(metrics, Metrics),
            evaluation=_imported(evaluation, Metrics),
            registered=_imported(registered, Model),
        )
        return outputs(task.outputs["Output"], task.outputs["summary"])

    result = report_alone().outputs
    summary = json.loads(result["text"])
    assert summary["dataset_ref"] == version["ref"]
    assert summary["registered_model"] == 1
    assert "digits@1.0.0" in open(result["summary"].path).read()
