"""End to end: the whole DAG (fingerprint -> shard -> version -> train -> evaluate -> register ->
gate/promote -> report) through kfp.local's SubprocessRunner on small real data, as `make demo`
runs it."""

import json
import os
import subprocess
import sys

import pytest

from fakes.launcher import mlmd_rejections, output_artifacts
from tfrecord_suite.io import storage
from tfrecord_suite.kfp.local_run import run_local
from tfrecord_suite.registry.manifest import Manifest
from tfrecord_suite.registry.models import ModelRegistry


@pytest.mark.e2e
def test_digits_dag_beats_majority_baseline(tmp_path, digits_dir):
    """Two local runs of the whole DAG on the digits. (Which steps Kubeflow caches on a second
    identical run is proven on KFP 2.17.0's real backend: tests/integration/test_kfp.py.)"""
    r = run_local(
        input_uri=digits_dir,
        workdir=str(tmp_path / "bucket"),
        dataset_name="digits",
        epochs=8,
        batch_size=32,
        learning_rate=0.003,
    )
    manifest = Manifest.load(storage.read_text(os.path.join(r["dataset_uri"], "manifest.json")))
    test_hist = manifest.statistics["test"]["label_histogram"]
    baseline = max(test_hist.values()) / sum(test_hist.values())
    assert r["metrics"]["test_accuracy"] > baseline + 0.4, (r["metrics"], baseline)
    assert r["dataset_ref"].endswith("digits@1.0.0")
    # zero-copy: the shard step wrote into the registry and the version references those files,
    # so each shard exists once on disk (TFDS's view adds names, not files)
    inodes = {
        os.stat(os.path.join(d, f)).st_ino
        for d, _, names in os.walk(tmp_path / "bucket")
        for f in names
        if ".tfrecord" in f
    }
    assert len(inodes) == manifest.totals["shards"]
    assert manifest.storage["shared_bytes"] == 0
    assert os.path.isfile(os.path.join(r["export_dir"], "saved_model.pb"))
    metrics = json.loads(storage.read_text(r["metrics_file"]))
    assert metrics["dataset_digest"] == manifest.content_digest
    # first model: nothing to beat, so it is registered and promoted to `stable`
    assert (r["registered_model"], r["gate"]) == (1, "promote"), r["gate_reason"]
    models = ModelRegistry(str(tmp_path / "bucket" / "registry" / "_models"))
    assert models.alias("digits", "stable") == 1
    models.verify("digits", 1)
    # a rerun on the same data publishes nothing new (the version step is idempotent); its one
    # epoch model is registered but scores worse on the same test split, so the gate holds
    again = run_local(
        input_uri=digits_dir, workdir=str(tmp_path / "bucket"), dataset_name="digits", epochs=1
    )
    assert again["dataset_ref"] == r["dataset_ref"]
    assert (again["registered_model"], again["gate"]) == (2, "hold"), again["gate_reason"]
    assert models.alias("digits", "stable") == 1 and models.alias("digits", "latest") == 2
    lineage = models.get("digits", 2).manifest["lineage"]
    assert lineage["dataset_digest"] == manifest.content_digest
    # every artifact of every step of both runs (a dataset's first version has no parent, the
    # first evaluation no baseline) passes the launcher's conversion into ML Metadata
    root = str(tmp_path / "bucket" / "pipeline_root")
    tasks = sorted({task for task, _, _ in output_artifacts(root)})
    with_artifacts = ["evaluate", "register", "report", "shard", "train"]
    assert sorted(t.split("/")[1] for t in tasks) == sorted([*with_artifacts, "version"] * 2)
    assert mlmd_rejections(root) == []


def _cli_run(*args: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "tfrecord_suite.cli", "run", *args, "--json"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


@pytest.mark.e2e
def test_cli_run_on_penguins_csv_then_append_a_day(tmp_path, penguins_csv):
    """A daily run: the first part makes 1.0.0, the next day's rows are appended as 1.1.0 by
    ``run --publish-mode append``, and the model trains on both parts."""
    lines = open(penguins_csv).read().splitlines(keepends=True)
    header, rows = lines[0], lines[1:]
    first, second = tmp_path / "day1" / "penguins.csv", tmp_path / "day2" / "penguins.csv"
    # alternate rows: each day holds every species (an append must keep the label classes)
    for path, part in ((first, rows[0::2]), (second, rows[1::2])):
        path.parent.mkdir()
        path.write_text(header + "".join(part))
    bucket = str(tmp_path / "bucket")
    common = ("--workdir", bucket, "--batch-size", "16", "--learning-rate", "0.01")
    r = _cli_run("--input", str(first), "--epochs", "10", *common)
    assert r["dataset_ref"].endswith("penguins@1.0.0")
    assert r["metrics"]["test_accuracy"] > 0.6  # majority class (Adelie) is about 0.44

    r2 = _cli_run("--input", str(second), "--epochs", "2", "--publish-mode", "append", *common)
    assert r2["dataset_ref"].endswith("penguins@1.1.0")
    one = json.loads(storage.read_text(os.path.join(r["dataset_uri"], "manifest.json")))
    both = json.loads(storage.read_text(os.path.join(r2["dataset_uri"], "manifest.json")))
    assert both["totals"]["records"] == len(rows) > one["totals"]["records"]
    assert both["append"]["parent"] == "1.0.0"
    # the parent's shards are referenced, not copied: every one of them is in the new manifest
    assert {s["path"] for s in one["shards"]} < {s["path"] for s in both["shards"]}
    assert both["storage"]["shared_bytes"] == sum(s["bytes"] for s in one["shards"])
    metrics = json.loads(storage.read_text(r2["metrics_file"]))
    assert metrics["dataset_digest"] == both["content_digest"]
