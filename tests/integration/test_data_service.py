"""tf.data service for real: a dispatcher and workers as processes on 127.0.0.1 serve the reader.

The workers are ``tfrecord-suite data-service`` processes (what ``k8s/data-service`` runs), the
dispatcher is fault tolerant with a work dir, and the reader deals its files out among the
workers (static sharding by ``SHARD_HINT``).
"""

import collections
import os
import signal

import pytest
from support import multi_worker_train, write_csv

from tfrecord_suite.registry.datasets import Registry, shard_uris
from tfrecord_suite.schema import Schema
from tfrecord_suite.shard.step import ShardConfig, run_shard
from tfrecord_suite.train.reader import ReaderConfig, dataset_for_split, make_dataset
from tfrecord_suite.train.service import LocalDataService
from tfrecord_suite.train.trainer import TrainConfig, run_train

ROWS = 24_000


@pytest.fixture(scope="module")
def numbered(tmp_path_factory):
    """A version whose rows carry their number (``id``), 8 train shards."""
    base = tmp_path_factory.mktemp("numbered")
    rows = [[i, (i % 97) / 97.0, "ab"[i % 2]] for i in range(ROWS)]
    csv = write_csv(str(base / "rows.csv"), ["id", "x", "label"], rows)
    staged = str(base / "staged")
    run_shard(ShardConfig(input=csv, output=staged, label="label", num_shards=8))
    registry = Registry(str(base / "registry"))
    return f"{registry.root}/numbered@{registry.publish(staged, 'numbered').version}"


def _ids(dataset, take=None, on_batch=None):
    seen = collections.Counter()
    for n, (features, _) in enumerate(dataset.take(take) if take else dataset):
        seen.update(features["id"].numpy().ravel().tolist())
        if on_batch:
            on_batch(n, seen)
    return seen


def test_workers_read_every_record_exactly_once(numbered):
    one_pass = ReaderConfig(batch_size=128, repeat=False)
    expected = _ids(dataset_for_split(numbered, "train", one_pass))
    assert len(expected) > ROWS // 2 and set(expected.values()) == {1}
    with LocalDataService(workers=2) as service:
        served = _ids(dataset_for_split(numbered, "train", one_pass, service=service.address))
    assert served == expected
    # every process left on SIGTERM with 0: no TF 2.21 destructor crash
    assert service.exit_codes == {"dispatcher": 0, "worker-0": 0, "worker-1": 0}


def _ids_of_files(ref, split, config, keep):
    """The ids in the files of ``split`` whose position ``keep`` accepts (the reader's own
    parse, the files in shard order as the service's ``shard(workers, index)`` deals them)."""
    reg, dataset, version = Registry.resolve_ref(ref)
    manifest = reg.manifest(dataset, version)
    files = shard_uris(manifest, reg.version_dir(dataset, version), split)
    kept = [f for i, f in enumerate(files) if keep(i)]
    return set(_ids(make_dataset(kept, Schema.from_dict(manifest.schema), config)))


def test_a_worker_killed_mid_pass_is_restarted_and_no_record_is_lost(numbered):
    one_pass = ReaderConfig(batch_size=64, repeat=False)
    expected = set(_ids(dataset_for_split(numbered, "train", one_pass)))
    # worker-0 is first in the dispatcher's worker_addresses: SHARD_HINT gives it files 0, 2, ...
    worker_0_ids = _ids_of_files(numbered, "train", one_pass, lambda i: i % 2 == 0)
    with LocalDataService(workers=2) as service:
        victim = service.pids()["worker-0"]

        def kill_once(n, seen):
            # killed once it has delivered records (so the restart must deliver them again),
            # well before it could have delivered its whole share
            if not killed and seen.keys() & worker_0_ids:
                killed.append(n)
                os.kill(victim, signal.SIGKILL)

        killed = []

        served = _ids(
            dataset_for_split(numbered, "train", one_pass, service=service.address),
            on_batch=kill_once,
        )
        assert killed and service.restarts == 1 and service.pids()["worker-0"] != victim
    assert set(served) == expected  # nothing lost
    # at least once: the restarted worker read its share again from the start, so what it had
    # delivered before the kill came twice
    assert sum(served.values()) > len(expected)


def test_train_step_trains_through_local_workers(numbered, tmp_path):
    metrics = run_train(
        TrainConfig(
            dataset=numbered,
            model_dir=str(tmp_path / "model"),
            epochs=2,
            batch_size=256,
            probe_steps=0,
            input_service="local:2",
        )
    )
    assert metrics.input["service"] == {
        "input_service": "local:2",
        "workers": 2,
        "worker_restarts": 0,
    }
    assert len(metrics.history["loss"]) == 2 and metrics.evaluation["test"]["accuracy"] > 0


@pytest.mark.slow
def test_two_trainer_processes_read_through_one_shared_service(published_digits, tmp_path):
    """MultiWorkerMirroredStrategy with two trainer processes (TF_CONFIG on 127.0.0.1), both
    reading through one service of two workers, as trainers on several hosts would read through
    k8s/data-service: each input pipeline's own job over its own files, and they agree."""
    with LocalDataService(workers=2) as service:
        outs = multi_worker_train(
            ["--dataset", published_digits["ref"], "--model-dir", str(tmp_path / "model"),
             "--epochs", "2", "--batch-size", "16", "--probe-steps", "0",
             "--input-service", service.address]
        )  # fmt: skip
        assert service.restarts == 0
    assert outs[0]["replicas"] == 2 and outs[0]["weights_digest"] == outs[1]["weights_digest"]
    assert outs[0]["input"]["service"] == {"input_service": service.address}
