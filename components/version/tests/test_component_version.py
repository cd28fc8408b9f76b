"""The version component: its spec and metadata, and a run through kfp.local."""

import os

import pytest
from component_checks import check_metadata, check_spec, check_wrapper

NAME = "version"


def test_spec():
    check_spec(NAME)


def test_wrapper_holds_no_logic():
    check_wrapper(NAME)


def test_metadata():
    check_metadata(NAME)


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
