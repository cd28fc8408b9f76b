"""Helpers the tests import by name (a module of its own: with conftest.py files in both tests/
and components/, ``from conftest import ...`` would find whichever pytest loaded last)."""

from __future__ import annotations

import contextlib
import csv
import os
import socket
import subprocess
from collections.abc import Iterator


def stop_process(process: subprocess.Popen, timeout: float) -> None:
    """Terminate a server process; kill it if it has not ended after ``timeout`` seconds."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def free_port() -> int:
    with contextlib.closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def emulator_env(url: str) -> Iterator[None]:
    from tfrecord_suite.io import storage

    old = os.environ.get("STORAGE_EMULATOR_HOST")
    os.environ["STORAGE_EMULATOR_HOST"] = url
    storage.reset_gcs_client()
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("STORAGE_EMULATOR_HOST", None)
        else:
            os.environ["STORAGE_EMULATOR_HOST"] = old
        storage.reset_gcs_client()


@contextlib.contextmanager
def s3_env(env: dict[str, str]) -> Iterator[None]:
    """boto3's environment set to ``env`` (an S3 server's endpoint and credentials) meanwhile."""
    from tfrecord_suite.io import storage

    old = {k: os.environ.get(k) for k in (*env, *storage.S3_ENDPOINT_ENV)}
    for k in storage.S3_ENDPOINT_ENV:
        os.environ.pop(k, None)
    os.environ.update(env)
    storage.reset_s3_client()
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        storage.reset_s3_client()


def write_csv(path: str, header: list[str], rows: list[list[object]]) -> str:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    return path


def served_probabilities(export_dir: str, files: list[str], batch: int) -> np.ndarray:  # noqa: F821
    """What the exported model's serving signature answers for every record of ``files``."""
    import numpy as np
    import tensorflow as tf

    serve = tf.saved_model.load(export_dir).signatures["serving_default"]
    return np.concatenate(
        [
            serve(examples=b)["probabilities"].numpy()
            for b in tf.data.TFRecordDataset(files).batch(batch)
        ]
    )


def multi_worker_train(args: list[str], workers: int = 2, timeout: float = 600) -> list[dict]:
    """``tfrecord-suite train ARGS --strategy multi_worker --json`` as ``workers`` processes
    forming one MultiWorkerMirroredStrategy cluster on 127.0.0.1 (``TF_CONFIG``); each one's
    JSON summary, after all succeeded."""
    import json
    import sys

    cluster = {"worker": [f"127.0.0.1:{free_port()}" for _ in range(workers)]}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tfrecord_suite.cli",
                "train",
                *args,
                "--strategy",
                "multi_worker",
                "--json",
            ],
            env={
                **os.environ,
                "TF_CONFIG": json.dumps(
                    {"cluster": cluster, "task": {"type": "worker", "index": i}}
                ),
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(workers)
    ]
    outs = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, stderr[-3000:]
        outs.append(json.loads(stdout))
    return outs
