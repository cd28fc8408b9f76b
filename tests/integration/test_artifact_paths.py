"""Every step writes what Kubeflow keeps to ``artifact.path``, whatever the pipeline root.

The KFP launcher gives each output artifact a URI under the cluster's pipeline root
(``minio://`` on a standard install, ``s3://``, ``gs://``) and maps it to a local path
(``/minio/<bucket>/...``) that it uploads after the step. Here the artifacts carry ``minio://``
URIs and local paths in a temporary folder, as the launcher maps them, and each step of the DAG
is called in order: every output lands under its local path, no URI is changed (the launcher
would fail to upload a URI outside its bucket), and nothing is written beside them.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from tfrecord_suite.registry.models import ModelRegistry
from tfrecord_suite.steps import data as data_steps
from tfrecord_suite.steps import training as training_steps


class LauncherArtifact:
    """What the KFP launcher hands a step: a remote URI and its local mapping."""

    def __init__(self, mount: str, run: str, step: str, name: str):
        rest = f"mlpipeline/v2/artifacts/tfrecord-suite/{run}/{step}/{name}"
        self.uri = f"minio://{rest}"
        self.path = os.path.join(mount, "minio", rest)  # /minio/<rest> in a real pod
        self.metadata: dict[str, Any] = {}

    def log_metric(self, name: str, value: float) -> None:
        self.metadata[name] = value

    def log_confusion_matrix(self, classes: list[str], matrix: list[list[int]]) -> None:
        self.metadata["confusionMatrix"] = {"classes": classes, "matrix": matrix}


def _files(path: str) -> list[str]:
    if os.path.isfile(path):
        return [path]
    return [os.path.join(r, n) for r, _, names in os.walk(path) for n in names]


@pytest.mark.slow
def test_each_step_writes_under_the_launchers_local_path(tmp_path, penguins_csv, monkeypatch):
    mount, registry = str(tmp_path / "pod"), str(tmp_path / "registry")
    monkeypatch.chdir(tmp_path)  # a bogus relative path (e.g. "minio:/...") would land here
    run = "run-42"
    monkeypatch.setenv("TFRS_RUN_ID", run)  # what the downward API tells a step's pod

    def out(step: str, name: str) -> LauncherArtifact:
        return LauncherArtifact(mount, run, step, name)

    digest = data_steps.fingerprint_step(penguins_csv)
    staged, shard_summary = out("shard", "staged"), out("shard", "summary")
    data_steps.shard_step(
        input_uri=penguins_csv, registry_root=registry, dataset_name="penguins",
        fingerprint=digest, input_format="auto", label="species", key_column="",
        splits="train=80,validation=10,test=10", num_shards=0, target_shard_mb=128.0,
        readers=1, workers=1, gzip=False, max_bad_fraction=0.05, beam_args=[],
        staged=staged, summary=shard_summary,
    )  # fmt: skip
    # the shards are staged under the registry, keyed on the run; the artifact says where
    assert staged.metadata["staged_uri"].startswith(
        os.path.join(registry, "penguins", "_data", f"run-{run}-")
    )
    dataset, card = out("version", "dataset"), out("version", "card")
    ref, content = data_steps.version_step(
        staged=staged, registry_root=registry, dataset_name="penguins", bump="auto",
        dataset=dataset, card=card,
    )  # fmt: skip
    assert ref == f"{registry}/penguins@1.0.0"
    model, metrics = out("train", "model"), out("train", "metrics")
    confusion, report = out("train", "classification_metrics"), out("train", "report")
    training_steps.train_step(
        dataset_ref=ref, dataset_digest=content, strategy="auto", cpu_devices=1, epochs=2,
        batch_size=16, learning_rate=0.01, model_fn="", model=model, metrics=metrics,
        classification_metrics=confusion, report=report,
    )  # fmt: skip
    evaluation, decision = out("evaluate", "evaluation"), out("evaluate", "decision")
    gate = training_steps.evaluate_step(
        dataset=dataset, model=model, model_registry="", model_name="", baseline_alias="stable",
        tolerance=0.0, evaluation=evaluation, decision=decision,
    )  # fmt: skip
    registered = out("register", "registered")
    number = training_steps.register_step(
        dataset=dataset, model=model, decision=decision, model_registry="", model_name="",
        registered=registered,
    )  # fmt: skip
    assert (gate, number) == ("promote", 1)
    assert training_steps.promote_step(
        registered=registered, decision=decision, model_registry="", model_name="",
        alias="stable",
    ) == 1  # fmt: skip
    summary = out("report", "summary")
    report_json = json.loads(
        training_steps.report_step(
            dataset=dataset, model=model, metrics=metrics, summary=summary,
            decision=decision, registered=registered,
        )
    )  # fmt: skip

    written = {
        "shard summary": shard_summary.path,
        "staged (summary.json, schema.json)": staged.path,
        "dataset (manifest.json, card.md)": dataset.path,
        "dataset card": card.path,
        "model (export, metrics, reports)": model.path,
        "training report": report.path,
        "decision": decision.path,
        "registered (model.json)": registered.path,
        "run summary": summary.path,
    }
    for what, path in written.items():
        assert _files(path), f"{what}: nothing under {path}"
    assert os.path.isfile(os.path.join(model.path, "export", "saved_model.pb"))
    assert os.path.isfile(os.path.join(model.path, "checkpoints", "epoch-002.weights.h5"))
    assert json.load(open(os.path.join(dataset.path, "manifest.json")))["content_digest"] == content
    # URIs stay the launcher's; where the big data went is in the metadata
    for artifact in (staged, dataset, model, registered):
        assert artifact.uri.startswith("minio://mlpipeline/"), artifact.uri
    assert dataset.metadata["version_uri"] == os.path.join(registry, "penguins", "1.0.0")
    assert registered.metadata["registered_uri"] == os.path.join(
        registry, "_models", "penguins", "1"
    )
    assert report_json["export_dir"] == f"{model.uri}/export"
    # nothing landed outside the mount and the registry
    assert sorted(os.listdir(tmp_path)) == ["pod", "raw", "registry"]
    assert sorted(os.listdir(os.path.join(mount, "minio", "mlpipeline"))) == ["v2"]
    # the registry holds the dataset, the staging folder and the model: each step's big data
    assert sorted(os.listdir(registry)) == ["_models", "penguins"]


@pytest.mark.slow
def test_a_retried_register_returns_the_first_attempts_version(tmp_path):
    from test_models_registry import fake_training_output

    reg = ModelRegistry(str(tmp_path / "models"))
    out = fake_training_output(str(tmp_path / "train"))
    first = reg.register("m", out, "export", lineage={"pipeline_run_id": "run-1"})
    again = reg.register("m", out, "export", lineage={"pipeline_run_id": "run-1"})
    assert again.version == first.version == 1 and reg.versions("m") == [1]
    # another run, or other files in the same run, is a new version
    assert reg.register("m", out, "export", lineage={"pipeline_run_id": "run-2"}).version == 2
    with open(os.path.join(out, "metrics.json"), "a") as fh:
        fh.write(" ")
    assert reg.register("m", out, "export", lineage={"pipeline_run_id": "run-1"}).version == 3


def test_bad_data_says_a_retry_will_not_help(tmp_path):
    from tfrecord_suite.errors import RetryWillNotHelp

    raw = tmp_path / "raw.csv"
    raw.write_text("x,label\n" + "".join(f"{i},{'ab'[i % 2]}\n" for i in range(40)) + "oops\n" * 40)
    staged, summary = (LauncherArtifact(str(tmp_path / "pod"), "r", "shard", n) for n in "ab")
    with pytest.raises(RetryWillNotHelp, match="retrying the shard step will not help") as err:
        data_steps.shard_step(
            input_uri=str(raw), registry_root=str(tmp_path / "reg"), dataset_name="rows",
            fingerprint="", input_format="csv", label="label", key_column="",
            splits="train=80,validation=10,test=10", num_shards=0, target_shard_mb=128.0,
            readers=1, workers=1, gzip=False, max_bad_fraction=0.01, beam_args=[],
            staged=staged, summary=summary,
        )  # fmt: skip
    assert "bad" in str(err.value.__cause__)


def test_publishing_a_cached_shard_result_whose_data_is_gone_says_what_to_do(tmp_path):
    """Kubeflow may hand the version step a cached shard result from a run whose batch `version
    gc` has since removed: the step says so and how to run without the cache."""
    from tfrecord_suite.errors import RetryWillNotHelp

    staged = LauncherArtifact(str(tmp_path / "pod"), "r", "shard", "staged")
    staged.metadata["staged_uri"] = str(tmp_path / "reg" / "rows" / "_data" / "run-gone")
    dataset, card = (LauncherArtifact(str(tmp_path / "pod"), "r", "version", n) for n in "ab")
    with pytest.raises(RetryWillNotHelp, match=r"are gone.*--no-caching"):
        data_steps.version_step(
            staged=staged, registry_root=str(tmp_path / "reg"), dataset_name="rows",
            bump="auto", dataset=dataset, card=card,
        )  # fmt: skip
