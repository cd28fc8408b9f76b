"""Held folders: a killed process's folder goes with the next one made beside it, a live one's
stays, whatever the process that holds it (the shard step's spill, training's stager)."""

import os
import signal
import subprocess
import sys

import pytest

from tfrecord_suite.io import held_folders
from tfrecord_suite.io.held_folders import LOCK_FILE, HeldFolder

_HOLD = """
import sys, time
from tfrecord_suite.io.held_folders import HeldFolder
folder = HeldFolder.create("tfrs-test-", sys.argv[1])
print(folder.path, flush=True)
time.sleep(600)
"""


def _holder(parent):
    """A process that made a folder in ``parent`` and holds it; its folder."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(parent)], stdout=subprocess.PIPE, text=True
    )
    return proc, proc.stdout.readline().strip()


def test_a_killed_processs_folder_goes_with_the_next_one_and_a_live_ones_stays(tmp_path):
    dead, dead_folder = _holder(tmp_path)
    live, live_folder = _holder(tmp_path)
    try:
        with open(os.path.join(dead_folder, "part.rec"), "wb") as fh:
            fh.write(b"x" * 1000)
        dead.send_signal(signal.SIGKILL)  # no cleanup of its own
        dead.wait(timeout=30)
        assert os.path.isdir(dead_folder)
        (tmp_path / "tfrs-test-before-locks").mkdir()  # made before locks were kept
        (tmp_path / "tfrs-other-kind").mkdir()  # another prefix: not this sweep's
        mine = HeldFolder.create("tfrs-test-", str(tmp_path))
        kept = ["tfrs-other-kind", os.path.basename(live_folder)]
        assert sorted(os.listdir(tmp_path)) == sorted([*kept, os.path.basename(mine.path)])
        other = HeldFolder.create("tfrs-test-", str(tmp_path))
        assert os.path.isdir(mine.path) and other.path != mine.path  # held: kept
        other.remove()
        mine.remove()
        mine.remove()
        assert not os.path.exists(mine.path)
    finally:
        live.kill()
        live.wait(timeout=30)
    assert live_folder in held_folders.sweep(str(tmp_path), "tfrs-test-")  # its process is gone


def test_a_stager_made_where_a_killed_trainer_staged_removes_its_copies(tmp_path):
    from tfrecord_suite.train.staging import STAGE_PREFIX, StageConfig, Stager

    left = tmp_path / f"{STAGE_PREFIX}killed"  # a trainer's folder, its process gone
    left.mkdir()
    (left / "000000001-train-00000-of-00004.tfrecord").write_bytes(b"x" * 100)
    stager = Stager(StageConfig(str(tmp_path), files=1, part_mb=1, parts=1))
    assert os.listdir(tmp_path) == [os.path.basename(stager.folder)]
    folder = stager.folder
    del stager
    assert not os.path.exists(folder)


_CHURN = """
import os, sys, time
from tfrecord_suite.io.held_folders import HeldFolder
for i in range(50):
    folder = HeldFolder.create("tfrs-test-", sys.argv[1])
    with open(os.path.join(folder.path, "data"), "wb") as fh:
        fh.write(b"x")
    time.sleep(0.01)
    assert open(os.path.join(folder.path, "data"), "rb").read() == b"x", folder.path
    folder.remove()
"""


def test_processes_making_and_sweeping_at_once_never_remove_a_live_folder(tmp_path):
    procs = [
        subprocess.Popen([sys.executable, "-c", _CHURN, str(tmp_path)], stderr=subprocess.PIPE)
        for _ in range(6)
    ]
    errors = [p.communicate(timeout=120)[1].decode() for p in procs]
    assert [p.returncode for p in procs] == [0] * 6, errors
    assert "removed" not in "".join(errors)  # no sweep took a folder its holder was using
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("lock_file_gone", [False, True], ids=["lock-file-there", "lock-file-gone"])
def test_a_sweep_while_its_holder_removes_a_folder_leaves_that_to_the_holder(
    tmp_path, monkeypatch, lock_file_gone
):
    folder = HeldFolder.create("tfrs-test-", str(tmp_path))
    os.mkdir(os.path.join(folder.path, "bucket-0"))
    real_rmtree = held_folders.shutil.rmtree
    swept = []

    def rmtree_with_a_sweep_midway(path, **kwargs):
        if lock_file_gone and os.path.exists(os.path.join(path, LOCK_FILE)):
            os.remove(os.path.join(path, LOCK_FILE))  # as the holder's last step
        swept.extend(held_folders.sweep(str(tmp_path), "tfrs-test-"))  # another process's sweep
        real_rmtree(path, **kwargs)

    monkeypatch.setattr(held_folders.shutil, "rmtree", rmtree_with_a_sweep_midway)
    folder.remove()
    assert swept == []  # neither taken for a folder made before locks nor for a killed holder's
    assert os.listdir(tmp_path) == []


_KILLED_WHILE_REMOVING = """
import os, signal, sys
from tfrecord_suite.io import held_folders
folder = held_folders.HeldFolder.create("tfrs-test-", sys.argv[1])
os.mkdir(os.path.join(folder.path, "bucket-0"))
with open(os.path.join(folder.path, "bucket-0", "part"), "wb") as fh:
    fh.write(b"x" * 1000)
held_folders.shutil.rmtree = lambda *args, **kwargs: os.kill(os.getpid(), signal.SIGKILL)
folder.remove()
"""


def test_a_folder_whose_holder_was_killed_while_removing_it_goes_with_the_next_sweep(tmp_path):
    killed = subprocess.run([sys.executable, "-c", _KILLED_WHILE_REMOVING, str(tmp_path)])
    assert killed.returncode == -signal.SIGKILL
    (left,) = os.listdir(tmp_path)
    assert left.startswith(".tfrs-test-") and left.endswith("-removing")
    assert held_folders.sweep(str(tmp_path), "tfrs-test-") == [str(tmp_path / left)]
    assert os.listdir(tmp_path) == []
