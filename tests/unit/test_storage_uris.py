"""Which stores the storage layer reaches, and what the reader and trainer do with each."""

from __future__ import annotations

import os

import pytest
from support import unsized_reader

from tfrecord_suite.errors import UserError
from tfrecord_suite.io import storage


def test_object_store_uris_are_joined_and_normalized_alike():
    for scheme in ("gs://", "s3://"):
        root = f"{scheme}bucket/registry/"
        assert storage.is_remote(root) and storage.normalize(root) == f"{scheme}bucket/registry"
        assert storage.join(root, "d", "1.0.0") == f"{scheme}bucket/registry/d/1.0.0"
        assert storage.local_path_or_none(root) is None
    assert storage.is_s3("s3://b/k") and not storage.is_gcs("s3://b/k")
    assert not storage.is_remote("/data/registry") and not storage.is_remote("file:///x")


@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("minio://bucket/x", "MinIO and SeaweedFS speak S3: give s3://BUCKET"),
        ("abfs://c/x", "put the data and registries on GCS, S3 or a mounted folder"),
    ],
)
def test_stores_out_of_reach_are_named_with_what_to_do(uri, message):
    with pytest.raises(storage.UnsupportedStorage, match=message):
        storage.normalize(uri)
    assert storage.check_reachable("s3://b/x") == "s3://b/x"


def test_s3_checksums_compare_with_gcs_md5s_and_name_multipart_etags():
    md5 = "35d6d33467aae9a2e3dccb4b6b027878"
    assert storage.s3.etag_checksum(f'"{md5}"') == "md5:NdbTNGeq6aLj3MtLawJ4eA=="
    assert storage.s3.etag_checksum('"abc-3"') == "s3etag:abc-3"


def test_the_reader_stages_only_what_tensorflow_cannot_open():
    from tfrecord_suite.train.reader_config import ReaderConfig

    s3, gs, local = ["s3://b/a.tfrecord"], ["gs://b/a.tfrecord"], ["/d/a.tfrecord"]
    auto = ReaderConfig()
    assert auto.stages(s3) and not auto.stages(gs) and not auto.stages(local)
    assert ReaderConfig(remote_read="stage").stages(gs)
    assert not ReaderConfig(remote_read="stage").stages(local)
    with pytest.raises(UserError, match="remote_read=stream: TensorFlow cannot open s3://"):
        ReaderConfig(remote_read="stream").stages(s3)
    with pytest.raises(UserError, match="remote_read must be auto, stream or stage"):
        ReaderConfig(remote_read="fast")
    with pytest.raises(UserError, match="stage_files must be >= 1"):
        ReaderConfig(stage_files=0)


def test_epochs_run_into_each_other_only_where_the_shards_are_staged():
    """By default the file list repeats before the interleave where the stager can run on into
    the next epoch (s3://), and epochs stay apart where the shards are read in place."""
    from tfrecord_suite.train.reader import _layout

    def repeats_files(files, **fields):
        config = unsized_reader(**{"repeat": True, **fields})
        return _layout(files, config, None, "", True).repeat_files

    s3, gs, local = ["s3://b/a.tfrecord"], ["gs://b/a.tfrecord"], ["/d/a.tfrecord"]
    assert repeats_files(s3) and not repeats_files(gs) and not repeats_files(local)
    assert repeats_files(gs, remote_read="stage")
    assert not repeats_files(s3, interleave_epochs=False)
    assert repeats_files(gs, interleave_epochs=True) and repeats_files(
        local, interleave_epochs=True
    )
    assert not repeats_files(s3, repeat=False)


def test_the_trainer_refuses_a_model_dir_tensorflow_cannot_write():
    from tfrecord_suite.train.trainer import TrainConfig

    with pytest.raises(UserError, match="--model-dir s3://b/m: TensorFlow writes checkpoints"):
        TrainConfig(dataset="s3://b/reg/d@1", model_dir="s3://b/m").validate()
    TrainConfig(dataset="s3://b/reg/d@1", model_dir="/tmp/m").validate()


def test_the_store_clients_follow_an_environment_meanwhile_and_the_old_one_after(monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    storage.s3._CLIENTS["http://127.0.0.1:1"] = object()  # a client built before
    with storage.environment(
        {"AWS_ENDPOINT_URL_S3": "http://127.0.0.1:2", "STORAGE_EMULATOR_HOST": "http://h:3"},
        unset=storage.S3_ENDPOINT_ENV,
    ):
        assert storage.s3_endpoint() == "http://127.0.0.1:2" and not storage.s3._CLIENTS
        assert os.environ["STORAGE_EMULATOR_HOST"] == "http://h:3"
        storage.s3._CLIENTS["http://127.0.0.1:2"] = object()
    assert storage.s3_endpoint() == "http://127.0.0.1:1" and not storage.s3._CLIENTS
    assert "STORAGE_EMULATOR_HOST" not in os.environ and "AWS_ENDPOINT_URL_S3" not in os.environ
