"""s3:// against a real S3 server the tests start: SeaweedFS (Kubeflow's object store), built from
its Go module (tests/realparts), reached the way a Kubeflow step reaches it, through boto3's
environment (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``).

The storage primitives; atomic create and compare-and-swap raced by threads and by processes; the
registry's racing publishers; a fault-injecting proxy (503 SlowDown, 500, dropped connections,
and writes that landed but whose answer was lost); the shard step writing through Beam's S3
filesystem, the version step publishing, and the train step reading there.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from support import s3_env
from test_registry import make_staged

from fakes.faultproxy import FaultProxy
from tfrecord_suite.io import storage
from tfrecord_suite.registry.datasets import Registry

pytestmark = pytest.mark.s3


def test_storage_primitives_on_s3(s3_bucket, tmp_path):
    root = f"{s3_bucket}/a"
    assert storage.normalize(root + "/") == root and storage.is_remote(root)
    assert not storage.exists(f"{root}/x.json")
    storage.write_text(f"{root}/x.json", "one")
    storage.write_bytes(f"{root}/sub/y.bin", b"\x00" * 10)
    assert storage.read_text(f"{root}/x.json") == "one" and storage.exists(f"{root}/x.json")
    with pytest.raises(FileNotFoundError):
        storage.read_bytes(f"{root}/missing")
    with pytest.raises(FileNotFoundError):
        storage.stat(f"{root}/missing")
    assert [f.uri for f in storage.list_files(root)] == [f"{root}/sub/y.bin", f"{root}/x.json"]
    assert [f.uri for f in storage.list_files(root, recursive=False)] == [f"{root}/x.json"]
    assert storage.list_dirs(root) == ["sub"] and storage.list_dirs(s3_bucket) == ["a"]
    info = storage.stat(f"{root}/sub/y.bin")
    assert info.size == 10 and info.checksum.startswith("md5:")
    # the same bytes written again: a new generation, the same content identity
    storage.write_bytes(f"{root}/sub/y.bin", b"\x00" * 10)
    again = storage.stat(f"{root}/sub/y.bin")
    assert storage.content_id(again) == storage.content_id(info)

    # copies: within the store (server-side), in and out, and the bytes they count
    local = tmp_path / "big.bin"
    local.write_bytes(os.urandom(20 << 20))  # several 8 MiB parts: multipart both ways
    before = storage.bytes_copied()
    storage.copy(str(local), f"{root}/big.bin")
    storage.copy(f"{root}/big.bin", f"{root}/big-copy.bin")
    storage.copy(f"{root}/big-copy.bin", str(tmp_path / "back.bin"))
    assert (tmp_path / "back.bin").read_bytes() == local.read_bytes()
    assert storage.bytes_copied() - before == 3 * (20 << 20)
    assert storage.link_or_copy(str(local), f"{root}/linked.bin") is False  # no links there
    storage.download(f"{root}/big.bin", str(tmp_path / "dl" / "big.bin"), concurrency=4)
    assert (tmp_path / "dl" / "big.bin").read_bytes() == local.read_bytes()
    assert storage.sha256(f"{root}/big.bin") == storage.sha256(str(local))
    with storage.open_read(f"{root}/x.json") as fh:
        assert fh.read() == b"one"

    storage.delete(f"{root}/x.json")
    storage.delete(f"{root}/x.json")  # missing is fine
    with pytest.raises(FileNotFoundError):
        storage.delete(f"{root}/x.json", missing_ok=False)
    assert storage.delete_tree(root) == 4 and storage.list_files(root) == []


def test_atomic_create_and_compare_and_swap_hold_under_racing_threads(s3_bucket):
    """SeaweedFS honours If-None-Match: * and If-Match on the ETag for real: of 16 racing
    creators exactly one wins, and 8 racing incrementers lose no increment."""
    for round_ in range(10):
        key = f"{s3_bucket}/race/{round_}"
        winners = []

        def create(i, key=key, winners=winners):
            if storage.create_if_absent(key, f"writer {i}".encode()):
                winners.append(i)

        threads = [threading.Thread(target=create, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(winners) == 1, winners
        assert storage.read_bytes(key) == f"writer {winners[0]}".encode()

    counter = f"{s3_bucket}/counter"
    assert storage.compare_and_swap(counter, b"0", None)
    with pytest.raises(storage.PreconditionFailed):
        storage.compare_and_swap(counter, b"0 again", None)  # exists: "must not exist" fails
    refused = []

    def increment(times):
        for _ in range(times):
            while True:
                data, token = storage.read_with_token(counter)
                n = int(data.split()[0]) + 1
                try:  # a random tail: every write differs, as an alias's history does
                    storage.compare_and_swap(counter, f"{n} {os.urandom(4).hex()}".encode(), token)
                    break
                except storage.PreconditionFailed:
                    refused.append(1)

    threads = [threading.Thread(target=increment, args=(10,)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert int(storage.read_bytes(counter).split()[0]) == 80
    assert refused  # the race was real: some swaps lost and were retried


def _publish_in_process(args):
    root, staged = args
    result = Registry(root).publish(staged, "rows")
    return result.version, result.created


def test_racing_publisher_processes_and_aliases_lose_nothing(tmp_path, s3_bucket):
    """4 processes (spawned, each with its own client) publish at once, one repeating another's
    content; then 10 threads move one alias at once. No version and no alias write is lost."""
    root = f"{s3_bucket}/registry"
    staged = [make_staged(str(tmp_path / f"s{i}"), n=30 + i) for i in range(3)]
    staged.append(staged[0])
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        results = pool.map(_publish_in_process, [(root, s) for s in staged])
    versions = sorted({v for v, _ in results})
    assert versions == ["1.0.0", "1.1.0", "1.2.0"]
    assert sum(created for _, created in results) == 3
    reg = Registry(root)
    assert [str(v) for v in reg.versions("rows")] == versions
    for v in versions:
        assert reg.verify("rows", v)["ok"]
    reg.set_alias("rows", "stable", "1.0.0", expected=None)
    with pytest.raises(storage.PreconditionFailed):
        reg.set_alias("rows", "stable", "1.1.0", expected=None)
    reg.set_alias("rows", "stable", "1.1.0", expected="1.0.0")

    def flip(i):
        reg.set_alias("rows", "canary", versions[i % 3])

    with ThreadPoolExecutor(max_workers=10) as pool:
        for f in [pool.submit(flip, i) for i in range(10)]:
            f.result()
    body = json.loads(storage.read_text(reg.alias_uri("rows", "canary")))
    assert len(body["history"]) == 9  # every one of the 10 writes is recorded: none was lost
    assert str(reg.resolve("rows", "stable")) == "1.1.0"


def test_publish_verify_alias_survive_injected_faults_on_s3(tmp_path, s3_server):
    """Through a proxy that answers 503 SlowDown and 500, drops connections, and loses the
    answers of writes that landed: every publish, verification and alias update completes
    (boto3's retries; a conditional write retried after its first attempt landed is recognised
    as ours), and the data is right when read without faults."""
    bucket = s3_server.create_bucket("faults")
    staged = [make_staged(str(tmp_path / f"s{i}"), n=30 + i) for i in range(3)]
    with FaultProxy(s3_server.endpoint, every=4, s3=True) as proxy:
        with s3_env({**s3_server.env(), "AWS_ENDPOINT_URL": proxy.url}):
            reg = Registry(f"{bucket}/registry")
            versions = [reg.publish(s, "rows").version for s in staged]
            assert versions == ["1.0.0", "1.1.0", "1.2.0"]
            assert reg.publish(staged[0], "rows").created is False
            for v in versions:
                assert reg.verify("rows", v)["ok"]
            reg.set_alias("rows", "stable", "1.1.0", expected=None)
            reg.set_alias("rows", "stable", "1.2.0", expected="1.1.0")
            assert str(reg.resolve("rows", "stable")) == "1.2.0"
        faults = dict(proxy.faults)
    print(f"\nfaults injected and survived: {faults} over {proxy.requests} requests")
    assert set(faults) == {"503", "500", "drop", "lost"} and sum(faults.values()) >= 10
    with s3_env(s3_server.env()):
        reg = Registry(f"{bucket}/registry")
        assert [str(v) for v in reg.versions("rows")] == versions
        body = json.loads(storage.read_text(reg.alias_uri("rows", "stable")))
        assert body["version"] == "1.2.0" and len(body["history"]) == 1


def test_unreachable_s3_fails_clearly_and_leaves_no_version(tmp_path, s3_server):
    bucket = s3_server.create_bucket("down")
    staged = make_staged(str(tmp_path / "s"))
    with FaultProxy(s3_server.endpoint, every=1, s3=True) as proxy:
        env = {**s3_server.env(), "AWS_ENDPOINT_URL": proxy.url, "AWS_MAX_ATTEMPTS": "2"}
        with s3_env(env), pytest.raises(Exception) as err:
            Registry(f"{bucket}/registry").publish(staged, "rows")
    assert any(word in str(err.value) for word in ("SlowDown", "InternalError", "onnection"))
    with s3_env(s3_server.env()):
        assert Registry(f"{bucket}/registry").versions("rows") == []
    assert os.path.isdir(staged)
