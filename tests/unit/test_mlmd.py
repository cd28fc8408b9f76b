"""The rule Kubeflow's launcher applies to artifact metadata, restated by tfrecord_suite.steps.mlmd,
checked case by case against StructValueToMLMDValue in kubeflow/pipelines
backend/src/v2/metadata/converter.go (identical from KFP 2.0.0 to 2.17.0)."""

import math

import pytest

from fakes.launcher import mlmd_roundtrip
from tfrecord_suite.steps.mlmd import MetadataError, check_metadata, describe, mlmd_problems


@pytest.mark.parametrize(
    ("metadata", "refused"),
    [
        ({"ref": "gs://b/r/ds@1.0.0"}, False),  # StringValue -> string_value
        ({"records": 3}, False),  # NumberValue -> double_value
        ({"ok": True}, False),  # BoolValue -> int_value 1
        ({"splits": {"train": 1, "test": None}}, False),  # a struct, stored whole
        ({"classes": ["a", None]}, False),  # a list, stored whole
        ({"parent": None}, True),  # "TODO: support null": unknown/unsupported value type
        ({"score": math.nan}, True),  # not JSON: the executor output would not parse
        ({"nested": {"x": math.inf}}, True),
        ({"tags": {"a", "b"}}, True),
    ],
)
def test_what_the_launcher_converts(metadata, refused):
    assert bool(mlmd_problems(metadata)) is refused, mlmd_problems(metadata)


def test_describe_leaves_out_what_has_no_value_and_refuses_the_rest():
    class Artifact:
        name = "dataset"
        metadata = {"kept": 1}

    artifact = Artifact()
    describe(artifact, {"version": "1.0.0", "parent": None})
    assert artifact.metadata == {"kept": 1, "version": "1.0.0"}
    with pytest.raises(MetadataError, match=r"dataset metadata .* score: nan is not"):
        describe(artifact, {"score": math.nan})
    assert artifact.metadata == {"kept": 1, "version": "1.0.0"}  # nothing half-written
    with pytest.raises(MetadataError, match="parent: null"):
        check_metadata({"parent": None})


def test_what_a_downstream_step_reads_back():
    """toRuntimeArtifact in converter.go: doubles and ints come back as numbers (so a boolean
    as 1.0), structs and lists wrapped in {"struct": ...} / {"list": ...}, never unwrapped."""
    assert mlmd_roundtrip(
        {"v": 2, "ok": False, "s": "x", "splits": {"train": 3}, "classes": ["a"]}
    ) == {"v": 2.0, "ok": 0.0, "s": "x", "splits": {"struct": {"train": 3}},
          "classes": {"list": ["a"]}}  # fmt: skip


def test_log_metrics_refuses_every_value_the_launcher_could_not_read_and_logs_none():
    from tfrecord_suite.steps.mlmd import log_metrics

    class Metrics:
        name = "metrics"

        def __init__(self):
            self.logged = {}

        def log_metric(self, key, value):
            self.logged[key] = value

    metrics = Metrics()
    with pytest.raises(MetadataError, match=r"test_loss=nan, test_auc=inf"):
        log_metrics(metrics, {"test_accuracy": 0.5, "test_loss": math.nan, "test_auc": math.inf})
    assert metrics.logged == {}
    log_metrics(metrics, {"test_accuracy": 0.5, "examples_per_second": 12})
    assert metrics.logged == {"test_accuracy": 0.5, "examples_per_second": 12}


def test_a_metrics_artifact_takes_numbers_only():
    """describe() refuses kfp's Metrics: the UI's run page lists every field of one as a metric
    (a string quoted) and Compare runs lines them up as numbers; strings go on an artifact of
    their own (the evaluate step's decision, a Markdown)."""
    from kfp import dsl

    evaluation = dsl.Metrics(name="evaluation", metadata={})
    with pytest.raises(MetadataError, match=r"evaluation: a Metrics artifact carries numbers only"):
        describe(evaluation, {"decision": "promote"})
    assert evaluation.metadata == {}
    decision = dsl.Markdown(name="decision", metadata={})
    describe(decision, {"decision": "promote", "candidate_accuracy": 0.9})
    assert decision.metadata == {"decision": "promote", "candidate_accuracy": 0.9}
