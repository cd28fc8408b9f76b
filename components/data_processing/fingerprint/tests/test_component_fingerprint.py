"""The fingerprint component run through kfp.local (the checks every folder gets are in
tests/unit/test_component_folders.py)."""

import re

import pytest


@pytest.mark.e2e
def test_runs_in_kfp_local(fingerprint_run, digits):
    from tfrecord_suite.steps.data import fingerprint_step

    assert re.fullmatch(r"[0-9a-f]{64}", fingerprint_run.output)
    assert fingerprint_run.output == fingerprint_step(digits)
