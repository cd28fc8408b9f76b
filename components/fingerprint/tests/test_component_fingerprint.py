"""The fingerprint component: its spec and metadata, and a run through kfp.local."""

import re

import pytest
from component_checks import check_metadata, check_spec, check_wrapper

NAME = "fingerprint"


def test_spec():
    check_spec(NAME)


def test_wrapper_holds_no_logic():
    check_wrapper(NAME)


def test_metadata():
    check_metadata(NAME)


@pytest.mark.e2e
def test_runs_in_kfp_local(fingerprint_run, digits):
    from tfrecord_suite.kfp.tasks import fingerprint_task

    assert re.fullmatch(r"[0-9a-f]{64}", fingerprint_run.output)
    assert fingerprint_run.output == fingerprint_task(digits)
