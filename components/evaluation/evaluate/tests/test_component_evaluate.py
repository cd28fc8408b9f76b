"""The evaluate component: its defaults, and a run through kfp.local (the checks every folder gets
are in tests/unit/test_component_folders.py)."""

import pytest

NAME = "evaluate"


def test_defaults_are_the_gate_configs():
    from component_checks import defaults

    from tfrecord_suite.train.evaluate import GateConfig

    d = defaults(NAME)
    assert (d["baseline_alias"], d["tolerance"]) == (
        GateConfig.baseline_alias,
        GateConfig.tolerance,
    )


@pytest.mark.e2e
def test_runs_in_kfp_local_and_promotes_a_first_model(evaluate_run):
    """Nothing registered yet: no baseline to beat, and none named. The evaluation carries the
    candidate's score and nothing else (a Metrics artifact: numbers only, which the UI compares
    across runs); the decision, its reason and what it compared are the decision artifact's, a
    Markdown the UI renders."""
    assert evaluate_run["gate"] == "promote"
    evaluation = evaluate_run["evaluation"].metadata
    assert set(evaluation) == {"candidate_accuracy"}
    assert all(isinstance(v, float) for v in evaluation.values()), evaluation
    decision = evaluate_run["decision"]
    assert decision.metadata["decision"] == "promote"
    assert decision.metadata["reason"] == "no baseline model yet"
    assert decision.metadata["candidate_accuracy"] == evaluation["candidate_accuracy"]
    assert "baseline_version" not in decision.metadata
    assert "Model gate: **promote**" in open(decision.path).read()


@pytest.mark.e2e
def test_takes_a_dataset_made_by_another_component(local_root, version_run, train_run):
    """A Dataset artifact without the suite's metadata: a dsl.importer of the version folder."""
    from component_checks import imported, load
    from kfp import dsl
    from kfp.dsl import Dataset, Model

    evaluate = load(NAME)
    folder = version_run["dataset"].metadata["version_uri"]

    @dsl.pipeline
    def evaluate_on_a_folder() -> str:
        data = dsl.importer(artifact_uri=folder, artifact_class=Dataset).output
        task = evaluate(dataset=data, model=imported(train_run.outputs["model"], Model))
        return task.outputs["Output"]

    assert evaluate_on_a_folder().output in ("promote", "hold")


@pytest.mark.e2e
def test_a_dataset_that_names_no_version_fails_with_what_to_pass(
    local_root, train_run, tmp_path, capfd
):
    from component_checks import imported, load
    from kfp import dsl
    from kfp.dsl import Dataset, Model

    evaluate = load(NAME)
    (tmp_path / "rows.csv").write_text("a,b\n1,2\n")

    @dsl.pipeline
    def evaluate_on_rows():
        data = dsl.importer(artifact_uri=str(tmp_path), artifact_class=Dataset).output
        evaluate(dataset=data, model=imported(train_run.outputs["model"], Model))

    with pytest.raises(RuntimeError):
        evaluate_on_rows()
    out = capfd.readouterr()
    assert "names no dataset version: its metadata has no 'ref'" in out.out + out.err
