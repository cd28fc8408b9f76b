"""What every component folder must hold, checked for each (component_checks.py says why):
its committed spec, fresh and described; a wrapper that only calls its task; metadata.yaml by
kubeflow/pipelines-components' rules; OWNERS. Each folder's tests/ hold what is its own."""

import pytest
from component_checks import check_metadata, check_spec, check_wrapper

from tfrecord_suite.kfp.components import COMPONENTS


@pytest.mark.parametrize("name", list(COMPONENTS))
def test_spec(name):
    check_spec(name)


@pytest.mark.parametrize("name", list(COMPONENTS))
def test_wrapper_holds_no_logic(name):
    check_wrapper(name)


@pytest.mark.parametrize("name", list(COMPONENTS))
def test_metadata_and_owners(name):
    check_metadata(name)


@pytest.mark.slow
def test_a_host_run_without_the_package_says_what_is_missing(tmp_path, capfd):
    """kfp.local's SubprocessRunner(use_venv=True) runs a spec in a fresh virtual environment,
    which has neither kfp nor the package: the step says so and how to run it instead, where
    kfp's executor alone would fail with "No module named 'kfp'"."""
    from component_checks import load
    from kfp import local
    from kfp.local import config

    before = config.LocalExecutionConfig.instance
    local.init(local.SubprocessRunner(use_venv=True), pipeline_root=str(tmp_path / "root"))
    try:
        with pytest.raises(RuntimeError):
            load("fingerprint")(input_uri=str(tmp_path))
    finally:
        config.LocalExecutionConfig.instance = before
    out = "".join(capfd.readouterr())
    assert "No module named" not in out
    assert "error: the fingerprint component runs the tfrecord-suite package and kfp" in out
    assert "SubprocessRunner(use_venv=False)" in out and "DockerRunner" in out
