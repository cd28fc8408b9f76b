"""Training reads gs:// through TensorFlow's own GCS filesystem, for real.

The shard and version steps write a dataset version to a local GCS server (fake-gcs-server,
through the Cloud Storage client and Beam's GcsIO); the train step then runs on its ``gs://``
reference in a process of its own whose TensorFlow reaches the same server as
``storage.googleapis.com`` over TLS (tests/fakes/gcs_tls.py says how). The proxy in front of
the server counts what TensorFlow fetched: every shard's bytes crossed it, and no shard was
copied to local disk first.

What it cannot show: GCS itself (its time to first byte, its throughput), credentials other than
a test token, and a network other than loopback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from fakes.gcs_tls import local_gcs

pytestmark = [pytest.mark.gcs, pytest.mark.slow]
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def gcs(tmp_path_factory):
    with local_gcs(str(tmp_path_factory.mktemp("local-gcs"))) as server:
        yield server


def test_the_train_step_reads_a_gs_version_through_tensorflows_filesystem(
    gcs, penguins_csv, tmp_path
):
    from tfrecord_suite.io import storage
    from tfrecord_suite.registry.manifest import Manifest

    with storage.environment(gcs.python_env()):
        bucket = gcs.create_bucket("penguins-bucket")
        # the shard and version steps, as their components call them, writing to the local GCS
        registry, ref, digest = shard_and_version_penguins(bucket, penguins_csv, tmp_path)
        manifest = Manifest.load(storage.read_text(f"{registry}/penguins/1.0.0/manifest.json"))
    shard_bytes = sum(s["bytes"] for s in manifest.shards)

    # the train step in a process whose TensorFlow reaches the server as storage.googleapis.com
    before = dict(gcs.proxy.stats)
    out = tmp_path / "train"
    train_step_in_a_process(ref, digest, out, {**gcs.python_env(), **gcs.tensorflow_env()})
    # TensorFlow fetched every shard through the proxy, over TLS: its own GCS filesystem
    fetched = gcs.proxy.stats["bytes_down"] - before["bytes_down"]
    assert gcs.proxy.stats["tunnels"] > before["tunnels"]
    assert fetched >= shard_bytes, (fetched, shard_bytes)
    # and nothing was copied to local disk first
    local = [f for _, _, files in os.walk(tmp_path) for f in files if ".tfrecord" in f]
    assert local == []


def shard_and_version_penguins(bucket: str, penguins_csv: str, tmp_path) -> tuple[str, str, str]:
    """The shard and version steps, as their components call them, on the penguins table copied
    to ``bucket``; returns the registry root, the version's reference and its digest."""
    from fakes.artifacts import Artifact
    from tfrecord_suite.io import storage
    from tfrecord_suite.steps import data as data_steps

    registry = f"{bucket}/registry"
    raw = f"{bucket}/raw/penguins.csv"
    storage.copy(penguins_csv, raw)
    staged = Artifact("", path=str(tmp_path / "staged"))
    summary = Artifact("", path=str(tmp_path / "summary.md"))
    data_steps.shard_step(
        input_uri=raw, registry_root=registry, dataset_name="penguins",
        fingerprint=data_steps.fingerprint_step(raw), input_format="auto", label="species",
        key_column="", splits="train=80,validation=10,test=10", num_shards=2,
        target_shard_mb=128.0, readers=1, workers=1, gzip=False, max_bad_fraction=0.05,
        beam_args=[], staged=staged, summary=summary,
    )  # fmt: skip
    assert staged.metadata["staged_uri"].startswith(f"{registry}/penguins/_data/run-")
    dataset = Artifact("", path=str(tmp_path / "dataset"))
    card = Artifact("", path=str(tmp_path / "card.md"))
    ref, digest = data_steps.version_step(
        staged=staged, registry_root=registry, dataset_name="penguins", bump="auto",
        dataset=dataset, card=card,
    )  # fmt: skip
    assert ref == f"{registry}/penguins@1.0.0"
    return registry, ref, digest


def train_step_in_a_process(ref: str, digest: str, out, env: dict[str, str]) -> dict:
    """The train step on ``ref`` in a process of its own with ``env`` added (a store's endpoint
    and credentials, as a Kubeflow pod gets them); checks the model and returns its metrics and
    model metadata."""
    code = (
        f"import json, sys; sys.path[:0] = [{os.path.join(HERE, '..')!r}]\n"
        "from fakes.artifacts import train_step\n"
        f"artifacts = train_step({ref!r}, {str(out)!r}, dataset_digest={digest!r}, epochs=2,"
        " batch_size=16, learning_rate=0.01)\n"
        "print(json.dumps({'metrics': artifacts['metrics'].logged,"
        " 'model': artifacts['model'].metadata}))\n"
    )
    env = {**os.environ, **env, "TF_CPP_MIN_LOG_LEVEL": "2"}
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["model"]["dataset_digest"] == digest
    assert 0.0 <= result["metrics"]["test_accuracy"] <= 1.0
    assert os.path.isfile(out / "model" / "export" / "saved_model.pb")
    return result
