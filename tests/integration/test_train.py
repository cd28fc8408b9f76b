"""Training for real: one device in-process, MirroredStrategy over 2 logical CPUs,
MultiWorkerMirroredStrategy as 2 processes on 127.0.0.1, and resume after a kill."""

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest
from support import multi_worker_train

from tfrecord_suite.registry.datasets import shard_uri
from tfrecord_suite.train.reader_config import ReaderConfig
from tfrecord_suite.train.trainer import TrainConfig, TrainError, run_train

CLI = [sys.executable, "-m", "tfrecord_suite.cli"]


def cli_train(ref, model_dir, *extra, env=None, timeout=300):
    proc = subprocess.run(
        [
            *CLI,
            "train",
            "--dataset",
            ref,
            "--model-dir",
            model_dir,
            "--json",
            "--probe-steps",
            "5",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _import_noise(proc.stderr) == []
    return json.loads(proc.stdout)


def _import_noise(stderr: str) -> list[str]:
    from tfrecord_suite.tf_import import NOISE

    return [line for line in stderr.splitlines() if NOISE.fullmatch(line.encode())]


def test_tensorflows_import_noise_is_dropped_where_the_entry_points_install_it():
    """TensorFlow 2.21 prints four lines on import at any log level (what tf_import drops);
    through tf_import.install (the CLI and the components' tasks call it) nothing is printed."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    plain = subprocess.run([sys.executable, "-c", "import tensorflow"], env=env,
                           capture_output=True, text=True, timeout=120)  # fmt: skip
    assert len(_import_noise(plain.stderr)) == 4, plain.stderr
    installed = "from tfrecord_suite import tf_import; tf_import.install(); import keras"
    quiet = subprocess.run([sys.executable, "-c", installed], env=env,
                           capture_output=True, text=True, timeout=120)  # fmt: skip
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr


def test_autographs_bytecode_leaves_the_temporary_folder_with_the_process(tmp_path):
    """AutoGraph imports each function it converts from a module it writes to TMPDIR; with
    bytecode written (Python's default: PYTHONDONTWRITEBYTECODE unset, as CI's shell sets it),
    that import leaves a ``.pyc`` there, which the entry points' tf_import.install removes."""
    code = (
        "import sys\n"
        "if sys.argv[1] == 'installed':\n"
        "    from tfrecord_suite import tf_import; tf_import.install()\n"
        "import tensorflow as tf\n"
        "@tf.function\n"
        "def f(x):\n"
        "    if tf.reduce_sum(x) > 0:\n"
        "        x += 1\n"
        "    return x\n"
        "assert f(tf.constant([1])).numpy().tolist() == [2]\n"
    )
    script = tmp_path / "convert.py"  # AutoGraph reads the function's source: not from -c
    script.write_text(code)
    left = {}
    for how in ("plain", "installed"):
        temp = tmp_path / how
        temp.mkdir()
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        run = subprocess.run([sys.executable, str(script), how], capture_output=True, text=True,
                             timeout=120, env={**env, "TMPDIR": str(temp)})  # fmt: skip
        assert run.returncode == 0, run.stderr[-2000:]
        left[how] = sorted(str(p.relative_to(temp)) for p in temp.rglob("*"))
    assert any(p.endswith(".pyc") for p in left["plain"]), left  # what install removes
    assert left["installed"] == []


def test_trains_beats_baseline_and_serves_raw_examples(published_digits, tmp_path):
    import numpy as np
    import tensorflow as tf

    model_dir = str(tmp_path / "model")
    m = run_train(
        TrainConfig(
            dataset=published_digits["ref"],
            model_dir=model_dir,
            epochs=6,
            batch_size=32,
            learning_rate=0.003,
            probe_steps=10,
            reproducible=True,
        )
    )
    assert m.evaluation["test"]["accuracy"] > 0.6  # 10 balanced classes: chance is 0.1
    assert len(m.history["loss"]) == 6 and m.history["loss"][-1] < m.history["loss"][0]
    check = m.serving_check
    assert check["examples"] == published_digits["manifest"].splits["test"]["records"]
    assert abs(check["accuracy"] - m.evaluation["test"]["accuracy"]) < 0.05
    assert np.array(check["confusion_matrix"]).sum() == check["examples"]
    assert 0 <= m.input["input_wait_share"] <= 1
    for name in ("metrics.json", "report.md", "report.html", "training_curves.png"):
        assert os.path.exists(os.path.join(model_dir, name)), name
    assert os.listdir(os.path.join(model_dir, "checkpoints"))
    serve = tf.saved_model.load(os.path.join(model_dir, "export")).signatures["serving_default"]
    manifest = published_digits["manifest"]
    shard = shard_uri(manifest, published_digits["uri"], manifest.shards[0])
    batch = next(iter(tf.data.TFRecordDataset(shard).batch(5)))
    out = serve(examples=batch)
    assert out["probabilities"].shape == (5, 10)
    assert out["class_name"].dtype == tf.string


@pytest.mark.slow
def test_a_reproducible_run_trains_to_the_same_weights_twice(published_digits, tmp_path):
    """``--reproducible`` (op determinism for the run, the reader's order kept): a run here and
    one through the CLI, on the same version and seed, end with the same weights, bit for bit,
    and the same losses; the process-wide switch is off again after the run here."""
    from tensorflow.python.framework import config as tf_config

    here = run_train(
        TrainConfig(dataset=published_digits["ref"], model_dir=str(tmp_path / "a"), epochs=2,
                    batch_size=32, probe_steps=0, reproducible=True)
    )  # fmt: skip
    assert not tf_config.is_op_determinism_enabled()
    cli = cli_train(published_digits["ref"], str(tmp_path / "b"), "--epochs", "2",
                    "--batch-size", "32", "--probe-steps", "0", "--reproducible")  # fmt: skip
    assert cli["weights_digest"] == here.weights_digest
    assert cli["history"] == here.history


def test_refuses_version_failing_verification(published_digits, tmp_path):
    import shutil

    copy = tmp_path / "reg"
    shutil.copytree(published_digits["registry"].root, copy)
    manifest = published_digits["manifest"]
    victim = pathlib.Path(
        shard_uri(manifest, str(copy / "digits" / manifest.version), manifest.shards[0])
    )
    data = bytearray(victim.read_bytes())
    data[-3] ^= 0xFF
    victim.write_bytes(bytes(data))
    ref = f"{copy}/digits@{manifest.version}"
    with pytest.raises(TrainError, match=r"fails verification.*--skip-bad-records"):
        run_train(TrainConfig(dataset=ref, model_dir=str(tmp_path / "m"), epochs=1))
    m = run_train(
        TrainConfig(
            dataset=ref,
            model_dir=str(tmp_path / "m2"),
            epochs=1,
            reader=ReaderConfig(skip_bad_records=True),
            probe_steps=0,
        )
    )
    lost = m.bad_records_skipped
    assert 0 < lost <= manifest.shards[0]["records"]


@pytest.mark.slow
def test_mirrored_strategy_over_two_logical_cpus(published_digits, tmp_path):
    m = cli_train(
        published_digits["ref"],
        str(tmp_path / "m"),
        "--strategy",
        "mirrored",
        "--cpu-devices",
        "2",
        "--epochs",
        "2",
        "--batch-size",
        "16",
    )
    assert m["strategy"] == "MirroredStrategy" and m["replicas"] == 2
    assert m["global_batch_size"] == 32


@pytest.mark.slow
def test_multi_worker_two_processes_agree_on_weights(published_digits, tmp_path):
    scratch = tmp_path / "tmp"  # the workers' temporary folder
    scratch.mkdir()
    outs = multi_worker_train(
        ["--dataset", published_digits["ref"], "--model-dir", str(tmp_path / "model"),
         "--epochs", "2", "--batch-size", "16"],
        timeout=400, env={"TMPDIR": str(scratch)},
    )  # fmt: skip
    assert [o["strategy"] for o in outs] == ["CollectiveAllReduceStrategy"] * 2  # = MWMS
    assert outs[0]["replicas"] == 2
    assert outs[0]["weights_digest"] == outs[1]["weights_digest"]
    assert [o["chief"] for o in outs] == [True, False]
    assert json.loads((tmp_path / "model" / "metrics.json").read_text())["chief"] is True
    # the other worker exported too (saving is collective), into a folder it deleted
    assert outs[1]["export_dir"] == ""
    assert sorted(p.name for p in scratch.iterdir()) == []


@pytest.mark.slow
def test_killed_trainer_resumes_from_backup(published_digits, tmp_path):
    model_dir = tmp_path / "model"
    args = [
        *CLI,
        "train",
        "--dataset",
        published_digits["ref"],
        "--model-dir",
        str(model_dir),
        "--epochs",
        "8",
        "--batch-size",
        "16",
        "--probe-steps",
        "0",
        "--json",
    ]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 300
    seen = ""
    while time.time() < deadline:
        line = proc.stdout.readline()
        seen += line
        if "Epoch 4/8" in line:  # epochs 1-3 are backed up
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait(timeout=60)
    assert "Epoch 4/8" in seen, seen[-2000:]
    assert (model_dir / "backup").exists()
    m = cli_train(published_digits["ref"], str(model_dir), "--epochs", "8", "--batch-size", "16")
    assert len(m["history"]["loss"]) <= 5  # resumed at epoch 4, not from scratch
    assert not (model_dir / "backup").exists() or not os.listdir(model_dir / "backup")


def test_train_step_refuses_a_ref_whose_digest_changed(published_digits, tmp_path):
    """The kfp step is cached on (ref, digest); a ref that names other data must not train, and
    the error says that Kubeflow's retry will not help."""
    from fakes.artifacts import train_step
    from tfrecord_suite.errors import RetryWillNotHelp

    with pytest.raises(RetryWillNotHelp, match=r"expected 0000000000000000.*will not help") as err:
        train_step(published_digits["ref"], tmp_path, dataset_digest="0" * 64)
    assert isinstance(err.value.__cause__, TrainError)


def test_a_diverging_run_fails_the_step_before_any_metric_is_logged(published_digits, tmp_path):
    """An absurd learning rate makes the loss NaN. Logged as it was, the NaN reached the
    executor output as bare ``NaN``, which Kubeflow's launcher cannot parse (kfp.local can): the
    step must fail, saying why, and log nothing."""
    from fakes.artifacts import Artifact, train_step
    from tfrecord_suite.errors import RetryWillNotHelp

    metrics = Artifact("")
    with pytest.raises(RetryWillNotHelp, match=r"training diverged: loss was nan in epoch 1 "
                       r"\(learning rate 1e\+12\).*will not help") as err:  # fmt: skip
        train_step(published_digits["ref"], tmp_path, learning_rate=1e12, epochs=3, metrics=metrics)
    assert isinstance(err.value.__cause__, TrainError)
    assert metrics.logged == {} and metrics.metadata == {}
    # TerminateOnNaN stopped fit in its first epoch: nothing was exported
    assert not (tmp_path / "model" / "export").exists()
