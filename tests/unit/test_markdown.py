"""The Markdown the steps write reads in the Kubeflow UI as written: names in code spans (the UI's
markdown-to-jsx reads ``bill_length_mm`` as bill<em>length</em>mm), and the run summary lists the
train step's metrics only, not the properties Kubeflow's launcher adds to every artifact it
records (seen on the one-node cluster's UI: a ``store_session_info`` row of JSON, ``display_name``,
``examples<em>per</em>second``)."""

import json
import re
from types import SimpleNamespace

import pytest

from fakes.launcher import SESSION_INFO, recorded
from tfrecord_suite.markdown import code


@pytest.mark.parametrize(
    ("name", "span"),
    [
        ("bill_length_mm", "`bill_length_mm`"),
        (0.5, "`0.5`"),
        ("a`b", "``a`b``"),  # a fence longer than the backticks inside
        ("`x", "`` `x ``"),  # padded where it starts or ends with a backtick
    ],
)
def test_a_name_is_a_code_span(name, span):
    assert code(name) == span


def _words_outside_code_spans(markdown: str) -> str:
    return re.sub(r"(`+).*?\1", "", markdown)


def test_the_run_summary_lists_the_train_steps_metrics_as_kubeflow_hands_them_on(tmp_path):
    from tfrecord_suite.steps.training import report_step

    logged = {"test_accuracy": 0.90625, "examples_per_second": 237.6, "input_wait_share": 0.1268}
    metrics = SimpleNamespace(metadata=recorded(logged, "metrics"))
    assert set(metrics.metadata) > set(logged)  # what the step reads on a cluster
    summary = SimpleNamespace(path=str(tmp_path / "summary"))
    out = json.loads(
        report_step(
            dataset=SimpleNamespace(metadata=recorded({"ref": "s3://b/r/penguins@1.0.0"}, "d")),
            model=SimpleNamespace(uri="minio://mlpipeline/run/train/model", metadata={}),
            metrics=metrics,
            summary=summary,
        )
    )
    text = (tmp_path / "summary").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert rows == [
        "| `examples_per_second` | 237.6 |",
        "| `input_wait_share` | 0.1268 |",
        "| `test_accuracy` | 0.90625 |",
    ]
    assert SESSION_INFO not in text and "display_name" not in text
    assert out["metrics"] == logged
    assert "_" not in _words_outside_code_spans(text.split("| metric |")[1])


def test_the_dataset_card_and_the_shard_summary_show_feature_names_as_written():
    from tfrecord_suite.registry.card import dataset_card
    from tfrecord_suite.registry.manifest import Manifest
    from tfrecord_suite.shard.step import summary_markdown
    from tfrecord_suite.shard.summary import ShardSummary

    schema = {
        "features": [{"name": "bill_length_mm", "dtype": "float32", "kind": "numeric"}],
        "label": "species",
    }
    splits = {"train": {"records": 3, "shards": 1, "bytes": 10}}
    card = dataset_card(
        Manifest(
            dataset="penguins", version="1.0.0", schema=schema, splits=splits, shards=[],
            totals={"records": 3, "shards": 1, "bytes": 10}, content_digest="0" * 64,
            producer={"package": "tfrecord-suite 0.1.0", "pipeline_run_id": "r-1"},
        )
    )  # fmt: skip
    assert "| `bill_length_mm` |" in card
    assert "`pipeline_run_id=r-1`" in card
    summary = summary_markdown(
        ShardSummary(
            shards=[], input="s3://b/raw/penguins.csv", schema=schema,
            plan={"splits": {"train": {"num_shards": 1, "reasons": ["small"]}}},
            statistics={"train": {"count": 3, "features": {"bill_length_mm": {"min": 1.0}}}},
        )
    )  # fmt: skip
    assert "| `bill_length_mm` | float32 | numeric |" in summary


def test_the_training_report_shows_metric_class_and_strategy_names_as_written():
    from tfrecord_suite.train.metrics import TrainMetrics
    from tfrecord_suite.train.report import markdown

    metrics = TrainMetrics(
        dataset="penguins@1.0.0", dataset_digest="0" * 64, strategy="_DefaultDistributionStrategy",
        replicas=1, global_batch_size=64, epochs=1, steps_per_epoch=1, history={},
        epoch_seconds=[1.0], train_seconds=1.0, examples_per_second=10.0,
        evaluation={"test": {"sparse_categorical_accuracy": 0.5}}, input={},
        bad_records_skipped=0, weights_digest="", chief=True, model_dir="m", export_dir="m/e",
        serving_check={"accuracy": 0.5, "examples": 2, "classes": ["no_tumor", "tumor"],
                       "confusion_matrix": [[1, 0], [1, 0]]},
    )  # fmt: skip
    text = markdown(metrics, schema=None, png=None)
    assert "| split | `sparse_categorical_accuracy` |" in text
    assert "| | `no_tumor` | `tumor` |" in text and "| `no_tumor` | 1 | 0 |" in text
    assert text.splitlines()[2].startswith("`_DefaultDistributionStrategy` with 1 replica(s)")
