"""The register component run through kfp.local (the checks every folder gets are in
tests/unit/test_component_folders.py)."""

import pytest


@pytest.mark.e2e
def test_runs_in_kfp_local(register_run):
    assert register_run["number"] == 1
    assert register_run["registered"].metadata["version"] == 1
