"""The evaluate component: its spec, defaults and metadata, and a run through kfp.local."""

import json

import pytest
from component_checks import check_metadata, check_spec, check_wrapper, defaults

NAME = "evaluate"


def test_spec():
    check_spec(NAME)


def test_wrapper_holds_no_logic():
    check_wrapper(NAME)


def test_metadata():
    check_metadata(NAME)


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
