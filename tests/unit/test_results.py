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
