"""The resolve_dataset component: its spec and metadata, and a run through kfp.local that pins
an alias to the exact version the version step published."""

import pytest
from component_checks import check_metadata, check_spec, check_wrapper

NAME = "resolve_dataset"


def test_spec():
    check_spec(NAME)


def test_wrapper_holds_no_logic():
    check_wrapper(NAME)


def test_metadata():
    check_metadata(NAME)


@pytest.mark.e2e
def test_runs_in_kfp_local_and_describes_the_version_as_version_does(version_run, local_root):
    from component_checks import load

    resolved = load(NAME)(dataset_ref=f"{local_root['registry']}/digits@latest")
    assert resolved.outputs["ref"] == version_run["ref"]
    assert resolved.outputs["digest"] == version_run["digest"]
    ours = resolved.outputs["dataset"].metadata
    theirs = {k: v for k, v in version_run["dataset"].metadata.items() if k != "created"}
    assert ours == theirs  # the same artifact, whichever step made it
    with pytest.raises(RuntimeError):  # no such alias: the task fails
        load(NAME)(dataset_ref=f"{local_root['registry']}/digits@nonexistent")
