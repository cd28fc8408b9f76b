"""TFRecord framing without TensorFlow or Beam, checked against TensorFlow's own reader/writer."""

import io

import pytest

from tfrecord_suite.io import framing


def test_framing_matches_tensorflow_both_ways(tmp_path):
    import tensorflow as tf

    payloads = [b"", b"a", b"x" * 70_000, bytes(range(256))]
    ours = tmp_path / "ours.tfrecord"
    with open(ours, "wb") as fh:
        for p in payloads:
            framing.write_record(fh, p)
    assert [r.numpy() for r in tf.data.TFRecordDataset(str(ours))] == payloads
    theirs = tmp_path / "theirs.tfrecord"
    with tf.io.TFRecordWriter(str(theirs)) as writer:
        for p in payloads:
            writer.write(p)
    assert theirs.read_bytes() == ours.read_bytes()
    fh = io.BytesIO(theirs.read_bytes())
    assert [framing.read_record(fh) for _ in payloads] == payloads
    assert framing.read_record(fh) is None


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda b: b[:-2], "truncated record"),
        (lambda b: b[:5], "truncated record header"),
        (lambda b: b[:14] + bytes([b[14] ^ 1]) + b[15:], "data checksum mismatch"),
        (lambda b: bytes([b[0] ^ 1]) + b[1:], "length checksum mismatch"),
    ],
)
def test_damage_is_named(damage, message):
    with pytest.raises(framing.FramingError, match=message):
        framing.read_record(io.BytesIO(damage(framing.encode(b"hello world"))))
