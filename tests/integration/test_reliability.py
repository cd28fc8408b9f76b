"""Crashes and bad input: a killed shard job reruns to the same bytes and its spill folder goes;
empty and hostile input gets one clear error and writes nothing outside the target."""

import glob
import json
import os
import signal
import subprocess
import sys

import pytest

from realparts.processes import WaitError, wait_for
from tfrecord_suite.shard.sources import InputError
from tfrecord_suite.shard.step import ShardConfig, ShardError, run_shard


def _shards(folder):
    return {
        n: open(os.path.join(folder, n), "rb").read()
        for n in sorted(os.listdir(folder))
        if n.endswith(".tfrecord")
    }


def test_killed_shard_job_reruns_to_identical_output(tmp_path):
    from support import write_csv

    src = tmp_path / "in"
    src.mkdir()
    for f in range(6):
        write_csv(
            str(src / f"part-{f}.csv"),
            ["x", "label"],
            [[i * 0.5, i % 3] for i in range(f * 3000, (f + 1) * 3000)],
        )
    clean = str(tmp_path / "clean")
    run_shard(ShardConfig(input=str(src), output=clean, num_shards=2))
    out = str(tmp_path / "crashed")
    cmd = [
        sys.executable,
        "-m",
        "tfrecord_suite.cli",
        "shard",
        "--input",
        str(src),
        "--output",
        out,
        "--num-shards",
        "2",
    ]
    temp = tmp_path / "temp"  # the job's TMPDIR: where its disk shuffle spills
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp)}
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    # killed once Beam writes into the job's temporary folder (its beam-temp-* files), well
    # before the shards are moved into place (a fixed sleep lost that race on a fast machine)
    try:
        wait_for(
            lambda: glob.glob(os.path.join(out, ".tmp-shard-*", "beam-temp-*")),
            120,
            "the shard job's temporary files",
            alive=lambda: proc.poll() is None,
            interval=0.005,
        )
    except WaitError:
        assert proc.poll() is None, "the shard job ended before it could be killed mid-write"
        raise AssertionError("the shard job never started writing") from None
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert not os.path.exists(
        os.path.join(out, "summary.json")
    )  # incomplete output is visible as such
    (killed_spill,) = temp.glob("tfrs-shuffle-*")  # a copy of the data the job could not remove
    rerun = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert _shards(out) == _shards(clean)
    assert f"removed {killed_spill} " in rerun.stderr  # by the next step on the machine
    assert not list(temp.glob("*shuffle*")), list(temp.iterdir())  # Beam's own temp may stay


def test_empty_and_header_only_inputs(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(ShardError, match="no columns"):
        run_shard(ShardConfig(input=str(empty), output=str(tmp_path / "o1")))
    header = tmp_path / "header.csv"
    header.write_text("a,b,label\n")
    with pytest.raises(ShardError, match="holds no rows"):
        run_shard(ShardConfig(input=str(header), output=str(tmp_path / "o2")))
    folder = tmp_path / "nothing"
    folder.mkdir()
    with pytest.raises(InputError, match="matches no files"):
        run_shard(ShardConfig(input=str(folder), output=str(tmp_path / "o3")))


def test_images_that_are_not_images_fail_clearly(tmp_path):
    root = tmp_path / "imgs" / "cat"
    root.mkdir(parents=True)
    for i in range(3):
        (root / f"{i}.png").write_bytes(b"definitely not a png")
    with pytest.raises(ShardError, match=r"3 of 3 rows.*not a decodable image"):
        run_shard(ShardConfig(input=str(tmp_path / "imgs"), output=str(tmp_path / "o")))


def test_hostile_split_names_and_dataset_names_write_nothing(tmp_path, jsonl_file):
    from tfrecord_suite.registry.datasets import Registry
    from tfrecord_suite.registry.refs import InvalidName

    out = tmp_path / "out"
    for splits in ("../../etc=1", "a/b=1", "x\x07y=1"):
        with pytest.raises(ValueError, match="name=weight"):
            run_shard(ShardConfig(input=jsonl_file, output=str(out), splits=splits))
    assert not out.exists()
    reg = Registry(str(tmp_path / "reg"))
    for name in ("../../etc", "a/b", "x\x07y", ""):
        with pytest.raises(InvalidName):
            reg.publish(str(tmp_path), name)
    assert not (tmp_path / "reg").exists()


def test_no_secret_reaches_logs_outputs_or_the_registry(tmp_path, jsonl_file):
    """Credentials in the environment never show up in output, artifacts or the manifest, and a
    credential passed as a Beam option is refused by name, without echoing its value."""
    import uuid

    secret = f"sekrit-{uuid.uuid4().hex}"
    key_file = tmp_path / "key.json"
    key_file.write_text(json.dumps({"type": "service_account", "private_key": secret}))
    env = {
        **os.environ,
        "AWS_SECRET_ACCESS_KEY": secret,
        "GOOGLE_APPLICATION_CREDENTIALS": str(key_file),
        "KFP_TOKEN": secret,
    }
    cli = [sys.executable, "-m", "tfrecord_suite.cli", "-v"]
    out, reg = tmp_path / "staged", tmp_path / "registry"
    runs = [
        subprocess.run([*cli, "shard", "--input", jsonl_file, "--output", str(out)],
                       capture_output=True, text=True, env=env, timeout=300),
        subprocess.run([*cli, "version", "publish", "--staged", str(out), "--registry", str(reg),
                        "--dataset", "rows"], capture_output=True, text=True, env=env, timeout=300),
    ]  # fmt: skip
    for proc in runs:
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert secret not in proc.stdout + proc.stderr
    for folder in (out, reg):
        for root, _, files in os.walk(folder):
            for name in files:
                assert secret.encode() not in open(os.path.join(root, name), "rb").read(), name
    refused = subprocess.run(
        [*cli, "shard", "--input", jsonl_file, "--output", str(tmp_path / "x"), "--",
         f"--s3_secret_access_key={secret}"],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert refused.returncode == 2
    assert "beam option --s3_secret_access_key carries a credential" in refused.stderr
    assert secret not in refused.stdout + refused.stderr
    assert not (tmp_path / "x").exists()


def test_rerun_replaces_an_unfinished_output_but_never_foreign_or_finished_files(tmp_path):
    """Whatever moment a shard run dies at, the next run replaces what it left (work folder,
    shards moved before the summary); a folder holding anything else, or a finished output,
    still needs --overwrite."""
    from support import write_csv

    src = write_csv(str(tmp_path / "in.csv"), ["x", "label"], [[i, i % 2] for i in range(50)])
    out = tmp_path / "out"
    (out / ".tmp-shard-0123456789ab").mkdir(parents=True)
    (out / ".tmp-shard-0123456789ab" / "spill-00001").write_bytes(b"partial")
    (out / "train-00000-of-00001.tfrecord").write_bytes(b"half moved")
    (out / "dead_letter-00000-of-00001.jsonl").write_text("{}\n")
    summary = run_shard(ShardConfig(input=src, output=str(out), num_shards=1))
    assert summary.records == 50
    assert not any(p.name.startswith(".tmp-shard-") for p in out.iterdir())
    with pytest.raises(ShardError, match="not empty"):  # finished: needs --overwrite
        run_shard(ShardConfig(input=src, output=str(out), num_shards=1))
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    (foreign / "train-00000-of-00001.tfrecord").write_bytes(b"x")
    with pytest.raises(ShardError, match="not empty"):
        run_shard(ShardConfig(input=src, output=str(foreign), num_shards=1))
    assert (foreign / "notes.txt").read_text() == "mine"
