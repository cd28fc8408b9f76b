"""The report component run through kfp.local (the checks every folder gets are in
tests/unit/test_component_folders.py)."""

import json
from typing import NamedTuple

import pytest

NAME = "report"


@pytest.mark.e2e
def test_runs_in_kfp_local(version_run, train_run, evaluate_run, register_run):
    from component_checks import imported, load
    from kfp import dsl
    from kfp.dsl import Dataset, Markdown, Metrics, Model

    report = load(NAME)
    outputs = NamedTuple("Outputs", [("text", str), ("summary", Markdown)])  # noqa: UP014 - the form kfp documents

    @dsl.pipeline
    def report_alone() -> outputs:
        task = report(
            dataset=imported(version_run["dataset"], Dataset),
            model=imported(train_run.outputs["model"], Model),
            metrics=imported(train_run.outputs["metrics"], Metrics),
            decision=imported(evaluate_run["decision"], Markdown),
            registered=imported(register_run["registered"], Model),
        )
        return outputs(task.outputs["Output"], task.outputs["summary"])

    result = report_alone().outputs
    summary = json.loads(result["text"])
    assert summary["dataset_ref"] == version_run["ref"]
    assert summary["registered_model"] == 1
    text = open(result["summary"].path).read()
    assert "digits@1.0.0" in text and "1797 records" in text  # not "1797.0": MLMD gave a double
