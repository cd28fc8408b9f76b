"""The version component run through kfp.local (the checks every folder gets are in
tests/unit/test_component_folders.py)."""

import os

import pytest

NAME = "version"


@pytest.mark.e2e
def test_runs_in_kfp_local_and_publishes(version_run, local_root):
    from tfrecord_suite.io import storage
    from tfrecord_suite.registry.manifest import Manifest

    assert version_run["ref"] == os.path.join(local_root["registry"], "digits@1.0.0")
    manifest = Manifest.load(
        storage.read_text(os.path.join(local_root["registry"], "digits", "1.0.0", "manifest.json"))
    )
    assert version_run["digest"] == manifest.content_digest
    meta = version_run["dataset"].metadata
    assert (meta["version"], meta["digest"], meta["records"]) == (
        "1.0.0", manifest.content_digest, manifest.totals["records"],
    )  # fmt: skip
    assert "parent" not in meta  # a first version has none, and ML Metadata takes no null
