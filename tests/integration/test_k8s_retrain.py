"""Change-triggered retraining: the input fingerprint, and submitting only on new data (the
manifests that run it are tested in test_k8s_manifests.py)."""

import os
import time

import pytest


@pytest.mark.gcs
def test_gcs_fingerprint_follows_content_not_generation(gcs_bucket):
    from tfrecord_suite.io import storage
    from tfrecord_suite.shard import sources
    from tfrecord_suite.shard.step import input_fingerprint

    uri = f"{gcs_bucket}/raw/rows.csv"
    storage.write_text(uri, "x,label\n1,a\n")
    first_info = storage.stat(uri)
    first = input_fingerprint(sources.resolve_inputs(f"{gcs_bucket}/raw"))
    storage.write_text(uri, "x,label\n1,a\n")  # uploaded again: a new generation
    assert storage.stat(uri).generation != first_info.generation
    assert first_info.checksum.startswith("md5:")
    again = input_fingerprint(sources.resolve_inputs(f"{gcs_bucket}/raw"))
    assert again["digest"] == first["digest"]
    storage.write_text(uri, "x,label\n1,b\n")
    assert input_fingerprint(sources.resolve_inputs(uri))["digest"] != first["digest"]


def test_retrain_submits_only_when_the_input_changed(tmp_path):
    from test_registry import make_staged

    from tfrecord_suite.kfp.retrain import retrain
    from tfrecord_suite.registry.datasets import Registry
    from tfrecord_suite.shard import sources
    from tfrecord_suite.shard.step import input_fingerprint

    raw = tmp_path / "raw.csv"
    raw.write_text("x,label\n1,a\n2,b\n")
    reg = Registry(str(tmp_path / "reg"))
    calls = []

    def submit(params):
        calls.append(params)
        return {"run_id": f"run-{len(calls)}"}

    first = retrain(
        input_uri=str(raw),
        registry_root=reg.root,
        dataset="rows",
        if_changed=True,
        params={"epochs": 3},
        submit=submit,
    )
    assert first["submitted"] and "no version" in first["reason"]
    assert calls[0] == {
        "epochs": 3,
        "input_uri": str(raw),
        "registry_root": reg.root,
        "dataset_name": "rows",
    }
    staged = make_staged(str(tmp_path / "staged"))
    summary_path = os.path.join(staged, "summary.json")
    import json

    summary = json.load(open(summary_path))
    summary["input_fingerprint"] = input_fingerprint(sources.resolve_inputs(str(raw)))
    open(summary_path, "w").write(json.dumps(summary))
    reg.publish(staged, "rows")
    second = retrain(
        input_uri=str(raw),
        registry_root=reg.root,
        dataset="rows",
        if_changed=True,
        params={},
        submit=submit,
    )
    assert not second["submitted"] and "unchanged" in second["reason"] and len(calls) == 1
    # the same bytes written again (a new mtime, as a re-upload makes a new generation) are no
    # change: the fingerprint is over contents
    time.sleep(0.01)
    raw.write_text("x,label\n1,a\n2,b\n")
    again = retrain(
        input_uri=str(raw), registry_root=reg.root, dataset="rows", if_changed=True, params={},
        submit=submit,
    )  # fmt: skip
    assert not again["submitted"] and len(calls) == 1, again
    raw.write_text("x,label\n1,a\n2,b\n3,c\n")
    third = retrain(
        input_uri=str(raw),
        registry_root=reg.root,
        dataset="rows",
        if_changed=True,
        params={},
        submit=submit,
    )
    assert third["submitted"] and "differs" in third["reason"] and len(calls) == 2
    forced = retrain(
        input_uri=str(raw),
        registry_root=reg.root,
        dataset="rows",
        if_changed=False,
        params={},
        submit=submit,
    )
    assert forced["submitted"]
