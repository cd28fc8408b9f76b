"""The promote component run through kfp.local (the checks every folder gets are in
tests/unit/test_component_folders.py)."""

import os

import pytest

NAME = "promote"


@pytest.mark.e2e
def test_runs_in_kfp_local(local_root, register_run, evaluate_run):
    from component_checks import imported, load
    from kfp import dsl
    from kfp.dsl import Markdown, Model

    from tfrecord_suite.registry.models import ModelRegistry

    promote = load(NAME)

    @dsl.pipeline
    def promote_alone() -> int:
        return promote(
            registered=imported(register_run["registered"], Model),
            decision=imported(evaluate_run["decision"], Markdown),
        ).output

    assert promote_alone().output == 1
    models = ModelRegistry(os.path.join(local_root["registry"], "_models"))
    assert models.alias("digits", "stable") == 1
