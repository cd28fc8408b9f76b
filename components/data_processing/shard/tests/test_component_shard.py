"""The shard component: its defaults, and a run through kfp.local (the checks every folder gets
are in tests/unit/test_component_folders.py)."""

import json
import os

import pytest

NAME = "shard"


def test_defaults_are_the_shard_configs():
    from component_checks import defaults

    from tfrecord_suite.shard.step import ShardConfig

    d = defaults(NAME)
    assert (d["input_format"], d["splits"], d["target_shard_mb"], d["readers"], d["workers"],
            d["gzip"], d["max_bad_fraction"]) == (
        ShardConfig.format, ShardConfig.splits, ShardConfig.target_shard_mb, ShardConfig.readers,
        ShardConfig.workers, ShardConfig.gzip, ShardConfig.max_bad_fraction,
    )  # fmt: skip
    assert (d["image_size"], d["image_aspect"], d["image_quality"]) == (
        "", ShardConfig.image_aspect, ShardConfig.image_quality,
    )  # fmt: skip
    assert ShardConfig.image_size is None  # "" in the component: stored as they are


@pytest.mark.e2e
def test_runs_in_kfp_local_and_stages_under_the_registry(shard_run, fingerprint_run, local_root):
    from tfrecord_suite.io import storage

    # the shards are written under the registry (publishing then moves no data through the
    # pipeline root); the artifact says where
    staged = shard_run.outputs["staged"].metadata["staged_uri"]
    assert staged.startswith(os.path.join(local_root["registry"], "digits", "_data", "run-"))
    summary = json.loads(storage.read_text(os.path.join(staged, "summary.json")))
    assert summary["records"] > 0 and summary["bad_rows"] == 0
    assert summary["input_fingerprint"]["digest"] == fingerprint_run.output
    assert "records" in open(shard_run.outputs["summary"].path).read()
