"""The register component: its spec and metadata, and a run through kfp.local."""

import pytest
from component_checks import check_metadata, check_spec, check_wrapper

NAME = "register"


def test_spec():
    check_spec(NAME)


def test_wrapper_holds_no_logic():
    check_wrapper(NAME)


def test_metadata():
    check_metadata(NAME)


@pytest.mark.e2e
def test_runs_in_kfp_local(register_run):
    assert register_run["number"] == 1
    assert register_run["registered"].metadata["version"] == 1
