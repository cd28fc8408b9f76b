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
