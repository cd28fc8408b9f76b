"""Typed results: each has one JSON form, read back unchanged."""

from tfrecord_suite.train.evaluate import GateDecision, decide, markdown


def _decision(**overrides):
    fields = {
        "decision": "hold",
        "reason": "candidate 0.5000 is worse than baseline 0.9000 (tolerance 0.0)",
        "dataset": "digits@1.0.0",
        "dataset_digest": "ab" * 32,
        "split": "test",
        "metric": "accuracy",
        "higher_is_better": True,
        "candidate": {"value": 0.5, "examples": 10},
        "baseline_alias": "stable",
        "baseline_version": 3,
        "baseline": {"value": 0.9, "examples": 10},
    }
    return GateDecision(**{**fields, **overrides})


def test_gate_decision_round_trips_through_its_json_form():
    import json

    d = _decision()
    assert GateDecision.from_dict(json.loads(json.dumps(d.to_dict()))) == d
    # written by a later version with more keys: still read
    assert GateDecision.from_dict({**d.to_dict(), "added_later": 1}) == d


def test_gate_markdown_shows_both_models_or_only_the_candidate():
    text = markdown(_decision())
    assert "# Model gate: **hold**" in text and "| baseline v3 (stable) | 0.9000 | 10 |" in text
    first = markdown(_decision(decision="promote", baseline_version=None, baseline=None))
    assert "baseline v" not in first and "| candidate | 0.5000 | 10 |" in first


def test_decide_respects_direction_and_tolerance():
    assert decide(0.8, None, True, 0.0)[0] == "promote"
    assert decide(0.8, 0.81, True, 0.02)[0] == "promote"
    assert decide(0.8, 0.81, True, 0.0)[0] == "hold"
    assert decide(1.0, 0.9, False, 0.0)[0] == "hold"  # mse: lower is better


def test_shard_summary_reads_a_summary_written_before_it_was_typed(tmp_path):
    """summary.json keeps its form: one written before ShardSummary existed (no first_bad_row)
    loads, and writing it back gives the same keys plus the new one."""
    import json

    from tfrecord_suite.shard.summary import ShardSummary

    old = {
        "created": "2026-11-20T10:00:00+00:00",
        "input": "/data/penguins.csv",
        "format": "csv",
        "output": "/out",
        "splits": "train=80,validation=10,test=10",
        "key_column": None,
        "gzip": False,
        "schema": {"features": [], "label": "species"},
        "plan": {"config": {}, "splits": {"train": {"num_shards": 1, "reasons": []}}},
        "shards": [{"split": "train", "index": 0, "path": "/out/train-00000-of-00001.tfrecord"}],
        "statistics": {"train": {"count": 270}, "test": {"count": 74}},
        "records": 344,
        "bad_rows": 0,
        "rows_read": 344,
        "dead_letter": None,
        "dead_letter_files": [],
        "input_fingerprint": {"digest": "d" * 64, "files": []},
        "beam_metrics": {"records_written": 344},
        "seconds": 3.2,
    }
    (tmp_path / "summary.json").write_text(json.dumps(old))
    summary = ShardSummary.load(str(tmp_path))
    assert summary.records == 344 and summary.split_counts == {"train": 270, "test": 74}
    assert summary.to_dict() == {**old, "first_bad_row": None}
    # a hand-made staged folder for `version publish --staged` may hold only its shards
    minimal = ShardSummary.from_dict({"shards": old["shards"], "gzip": True})
    assert minimal.gzip and minimal.statistics == {} and minimal.records == 0


def test_train_metrics_keep_metrics_json_unchanged(tmp_path):
    """metrics.json written before TrainMetrics existed loads, and is written back the same."""
    import json

    from tfrecord_suite.train.metrics import TrainMetrics

    old = {
        "dataset": "digits@1.0.0",
        "dataset_digest": "d" * 64,
        "strategy": "OneDeviceStrategy",
        "replicas": 1,
        "global_batch_size": 32,
        "epochs": 2,
        "steps_per_epoch": 40,
        "history": {"loss": [1.2, 0.7]},
        "epoch_seconds": [3.1, 2.9],
        "train_seconds": 6.0,
        "examples_per_second": 427.0,
        "evaluation": {"test": {"accuracy": 0.9, "loss": 0.3}},
        "input": {},
        "bad_records_skipped": 0,
        "weights_digest": "w" * 64,
        "chief": True,
        "model_dir": "/m",
        "export_dir": "/m/export",
    }
    (tmp_path / "metrics.json").write_text(json.dumps(old))
    metrics = TrainMetrics.load(str(tmp_path))
    assert metrics.serving_check is None and metrics.to_dict() == old
    with_check = TrainMetrics.from_dict({**old, "serving_check": {"accuracy": 0.9}})
    assert json.loads(with_check.to_json())["serving_check"] == {"accuracy": 0.9}


def test_manifest_reads_one_written_before_it_was_typed_and_writes_it_back_unchanged():
    import json
    import os

    from tfrecord_suite.registry.manifest import Manifest

    # written by commit c810ea0 (manifests were dicts then), verbatim
    path = os.path.join(os.path.dirname(__file__), "data", "manifest-written-by-c810ea0.json")
    text = open(path).read()
    m = Manifest.load(text, path)
    assert (m.ref, m.format, m.shards_in_batches, m.compression) == ("small@1.0.0", 2, True, "")
    assert sum(map(m.split_records, m.splits)) == m.totals["records"]
    assert m.split_records("nope") == 0
    assert m.storage == {"added_bytes": m.totals["bytes"], "shared_bytes": 0}
    assert m.to_json() == json.dumps(json.loads(text), indent=2, sort_keys=True)
    assert Manifest.from_dict(m.to_dict()) == m


def test_a_manifest_from_before_formats_were_numbered_keeps_its_keys():
    from tfrecord_suite.registry.manifest import Manifest

    old = {  # format 1: no format, storage, records_digest or append keys; shards in the version
        "dataset": "rows",
        "version": "1.0.0",
        "created": "2026-01-01T00:00:00+00:00",
        "parent": None,
        "bump": "initial",
        "bump_reasons": ["first version"],
        "schema": {"features": [{"name": "x", "dtype": "float32", "kind": "numeric"}]},
        "splits": {"train": {"records": 2, "bytes": 20, "shards": 1}},
        "shards": [
            {
                "split": "train",
                "index": 0,
                "path": "data/train-00000-of-00001.tfrecord",
                "records": 2,
                "bytes": 20,
                "sha256": "ab" * 32,
            }
        ],
        "totals": {"records": 2, "bytes": 20, "shards": 1},
        "gzip": True,
        "statistics": {},
        "input_fingerprint": {},
        "content_digest": "cd" * 32,
        "producer": {"package": "tfrecord-suite 0.0.9"},
        "a_key_from_elsewhere": [1, 2],
    }
    m = Manifest.from_dict(old)
    assert m.format is None and not m.shards_in_batches and m.compression == "GZIP"
    assert m.storage is None and m.extra == {"a_key_from_elsewhere": [1, 2]}
    assert m.to_dict() == old
