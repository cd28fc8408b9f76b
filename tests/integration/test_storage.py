from concurrent.futures import ThreadPoolExecutor

import pytest

from tfrecord_suite.io import storage


def test_local_roundtrip_list_copy_delete(tmp_path):
    root = str(tmp_path)
    storage.write_text(storage.join(root, "a", "x.txt"), "hello")
    storage.write_bytes(storage.join(root, "a", "b", "y.bin"), b"\x00\x01")
    files = storage.list_files(root)
    assert [f.uri.rsplit("/", 1)[1] for f in files] == ["y.bin", "x.txt"]  # sorted by URI
    assert storage.read_text(storage.join(root, "a", "x.txt")) == "hello"
    storage.copy(storage.join(root, "a", "x.txt"), storage.join(root, "c", "x.txt"))
    assert storage.sha256(storage.join(root, "c", "x.txt")) == storage.sha256(
        storage.join(root, "a", "x.txt")
    )
    assert storage.list_dirs(root) == ["a", "c"]
    assert storage.delete_tree(storage.join(root, "a")) == 2
    assert not storage.exists(storage.join(root, "a"))
    with pytest.raises(FileNotFoundError):
        storage.read_bytes(storage.join(root, "missing"))


def test_local_create_if_absent_has_one_winner(tmp_path):
    target = str(tmp_path / "manifest.json")
    wins = []

    def attempt(i: int) -> None:
        if storage.create_if_absent(target, f"writer {i}".encode()):
            wins.append(i)

    with ThreadPoolExecutor(max_workers=16) as pool:
        for f in [pool.submit(attempt, i) for i in range(16)]:
            f.result()
    assert len(wins) == 1
    assert storage.read_text(target) == f"writer {wins[0]}"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(storage.TEMP_PREFIX)]


def test_local_compare_and_swap_never_loses_a_write(tmp_path):
    target = str(tmp_path / "counter")
    storage.write_text(target, "0")

    def increment() -> None:
        for _ in range(20):
            while True:
                data, token = storage.read_with_token(target)
                try:
                    storage.compare_and_swap(target, str(int(data) + 1).encode(), token)
                    break
                except storage.PreconditionFailed:
                    continue

    with ThreadPoolExecutor(max_workers=4) as pool:
        for f in [pool.submit(increment) for _ in range(4)]:
            f.result()
    assert storage.read_text(target) == "80"


def test_cas_on_missing_object_requires_none(tmp_path):
    target = str(tmp_path / "alias.json")
    storage.compare_and_swap(target, b"1", None)
    with pytest.raises(storage.PreconditionFailed):
        storage.compare_and_swap(target, b"2", None)


@pytest.mark.gcs
def test_gcs_roundtrip_on_emulator(gcs_bucket):
    base = f"{gcs_bucket}/dir"
    storage.write_text(f"{base}/a.txt", "one")
    storage.write_text(f"{base}/sub/b.txt", "two")
    assert [f.uri for f in storage.list_files(base)] == [f"{base}/a.txt", f"{base}/sub/b.txt"]
    assert storage.list_dirs(base) == ["sub"]
    storage.copy(f"{base}/a.txt", f"{base}/copy.txt")
    assert storage.read_text(f"{base}/copy.txt") == "one"
    assert storage.stat(f"{base}/copy.txt").size == 3
    storage.delete_tree(base)
    assert storage.list_files(base) == []


@pytest.mark.gcs
def test_gcs_create_if_absent_and_cas_on_fake_gcs_server(strict_gcs_bucket):
    uri = f"{strict_gcs_bucket}/v/manifest.json"
    assert storage.create_if_absent(uri, b"first")
    assert not storage.create_if_absent(uri, b"second")
    assert storage.read_text(uri) == "first"
    _, token = storage.read_with_token(uri)
    storage.compare_and_swap(uri, b"third", token)
    with pytest.raises(storage.PreconditionFailed):
        storage.compare_and_swap(uri, b"stale", token)
    assert storage.read_text(uri) == "third"


@pytest.mark.gcs
def test_fake_gcs_server_survives_a_long_session(fake_gcs_server):
    """The emulator's request log must not fill an unread pipe (it stalled after ~500 requests)."""
    import urllib.request

    for _ in range(1500):
        with urllib.request.urlopen(f"{fake_gcs_server}/storage/v1/b", timeout=10) as resp:
            assert resp.status == 200
