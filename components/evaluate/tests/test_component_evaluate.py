"""The evaluate component: its defaults, and a run through kfp.local (the checks every folder gets
are in components/test_component_folders.py)."""

import json

import pytest
from component_checks import defaults

NAME = "evaluate"


def test_defaults_are_the_gate_configs():
    from tfrecord_suite.train.evaluate import GateConfig

    d = defaults(NAME)
    assert (d["baseline_alias"], d["tolerance"]) == (
        GateConfig.baseline_alias,
        GateConfig.tolerance,
    )


@pytest.mark.e2e
def test_runs_in_kfp_local_and_promotes_a_first_model(evaluate_run):
    # nothing registered yet: no baseline to beat, and none named in the metadata
    assert evaluate_run["decision"] == "promote"
    assert "accuracy" in json.dumps(evaluate_run["evaluation"].metadata)
    assert "baseline_version" not in evaluate_run["evaluation"].metadata
