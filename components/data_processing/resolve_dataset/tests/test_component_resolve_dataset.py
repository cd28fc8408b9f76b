"""The resolve_dataset component run through kfp.local: it pins an alias to the exact version
the version step published (the checks every folder gets are in
tests/unit/test_component_folders.py)."""

import pytest

NAME = "resolve_dataset"


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
