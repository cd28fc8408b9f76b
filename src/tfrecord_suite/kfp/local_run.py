"""Run the pipeline DAG on this machine with ``kfp.local``, reading like the Kubeflow UI.

Everything lands under one working folder that stands in for a bucket::

    <workdir>/registry/<dataset>/<version>/   published dataset versions (shards: <dataset>/_data/)
    <workdir>/pipeline_root/                  kfp artifacts: summaries, models, metrics
    <workdir>/logs/run-<time>.log             kfp's full output: every step's streamed logs

The terminal gets one line per step as it starts and ends (with its duration), the epochs while
training, and the summary. ``runner="docker"`` runs every step inside its container image, as a
Kubeflow backend does; the working folder is then the pipeline root kfp mounts into each
container, so the input must lie inside it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import os
import re
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from tfrecord_suite.errors import UserError
from tfrecord_suite.io import storage

RUNNERS = ("subprocess", "docker")

# kfp.local has no callbacks: it reports each task on stdout, and these are its messages
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_STARTED = re.compile(r"Executing task '([^']+)'")
_FINISHED = re.compile(r"Task '([^']+)' finished with status (\w+)")
_EPOCH = re.compile(r"\bEpoch (\d+)/(\d+)\b")


class StepReporter(io.TextIOBase):
    """Stands in for ``sys.stdout`` during a run: all text to a log file, steps to ``say``.

    Args:
        log: The open log file that receives everything kfp prints.
        say: Called with each short line for the terminal.
        clock: Monotonic clock (tests pass their own).

    """

    def __init__(
        self,
        log: io.TextIOBase,
        say: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
    ):
        self._log = log
        self._say = say
        self._clock = clock
        self._pending = ""
        self._started: dict[str, float] = {}
        self._epoch: dict[str, str] = {}
        self.steps: list[dict[str, Any]] = []

    def writable(self) -> bool:
        """Always: this stands in for standard output."""
        return True

    def write(self, text: str) -> int:
        """Log ``text``; report every complete line that starts or ends a step."""
        self._log.write(text)
        self._pending += text
        *lines, self._pending = self._pending.split("\n")
        for line in lines:
            self._line(_ANSI.sub("", line))
        return len(text)

    def flush(self) -> None:
        """Flush the log file."""
        self._log.flush()

    def _line(self, line: str) -> None:
        if m := _STARTED.search(line):
            self._started[m[1]] = self._clock()
            self._say(f"[{_now()}] {m[1]}: started")
        elif m := _FINISHED.search(line):
            now = self._clock()
            took = now - self._started.get(m[1], now)
            state = m[2].lower()
            self.steps.append({"step": m[1], "status": state, "seconds": round(took, 1)})
            self._say(f"[{_now()}] {m[1]}: {state} in {took:.1f} s")
        elif (m := _EPOCH.search(line)) and self._started:
            step = next(reversed(self._started))
            if self._epoch.get(step) != m[0]:
                self._epoch[step] = m[0]
                self._say(f"[{_now()}] {step}: epoch {m[1]}/{m[2]}")


@contextlib.contextmanager
def _warnings_to(log: io.TextIOBase) -> Iterator[None]:
    """Send kfp.local's warnings to the run's log, not the terminal.

    kfp.local warns for every step that Kubernetes settings (requests, display names) do not
    apply locally and that a Python step on a custom image runs in this environment: true for
    every step of every local run, and screens of it.
    """
    with warnings.catch_warnings():

        def show(message, category, filename, lineno, file=None, line=None):
            log.write(warnings.formatwarning(message, category, filename, lineno, line))

        warnings.showwarning = show
        yield


@contextlib.contextmanager
def _local_run_id(log_path: str) -> Iterator[None]:
    """Tell the steps their run, as the downward API does on Kubernetes (see podinfo).

    The subprocess runner's steps inherit this process's environment; the docker runner's do
    not, and fall back as they do outside Kubernetes.
    """
    from tfrecord_suite.podinfo import RUN_ID_ENV

    previous = os.environ.get(RUN_ID_ENV)
    os.environ[RUN_ID_ENV] = "local-" + os.path.basename(log_path).removesuffix(".log")
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(RUN_ID_ENV, None)
        else:
            os.environ[RUN_ID_ENV] = previous


def _now() -> str:
    return dt.datetime.now().strftime("%H:%M:%S")


def run_local(
    *,
    input_uri: str,
    workdir: str,
    dataset_name: str,
    runner: str = "subprocess",
    say: Callable[[str], None] | None = None,
    **params: Any,
) -> dict[str, Any]:
    """Run the retraining pipeline (:mod:`tfrecord_suite.pipelines.retraining`) locally.

    Args:
        input_uri: Raw data.
        workdir: Local folder standing in for the bucket.
        dataset_name: Dataset name in ``<workdir>/registry``.
        runner: ``subprocess`` (this Python environment) or ``docker`` (each step in its
            image, through the engine ``DOCKER_HOST`` names).
        say: Where the per-step lines go (default: standard error).
        **params: Other pipeline parameters (``input_format``, ``epochs``...).

    Returns:
        The report step's summary (dataset ref and folder, model and export folders, metrics),
        with ``steps`` (each step's status and seconds) and ``log`` (the full log's path).

    Raises:
        UserError: An unknown runner, or with ``docker`` an input outside the working folder.
        RuntimeError: A step failed; the message names it and the log.

    """
    from kfp import local

    from tfrecord_suite.kfp.compile import build

    if runner not in RUNNERS:
        raise UserError(f"--runner {runner!r}: choose one of {', '.join(RUNNERS)}")
    workdir = storage.normalize(workdir)
    input_uri = input_uri if storage.is_remote(input_uri) else storage.normalize(input_uri)
    os.makedirs(workdir, exist_ok=True)
    if runner == "docker":
        if not storage.is_remote(input_uri) and not input_uri.startswith(workdir + os.sep):
            raise UserError(
                f"--input {input_uri} is outside --workdir {workdir}: the docker runner mounts "
                "only the working folder into the step containers; copy the data into it"
            )
        # the steps run as the images' UID 10001 and write into the mounted working folder
        os.chmod(workdir, 0o777)
        pipeline_root = workdir
        kfp_runner: Any = local.DockerRunner()
    else:
        pipeline_root = os.path.join(workdir, "pipeline_root")
        kfp_runner = local.SubprocessRunner(use_venv=False)
    local.init(runner=kfp_runner, pipeline_root=pipeline_root, raise_on_error=True)
    logs = os.path.join(workdir, "logs")
    os.makedirs(logs, exist_ok=True)
    log_path = os.path.join(logs, f"run-{dt.datetime.now():%Y%m%d-%H%M%S}.log")
    say = say or (lambda line: print(line, file=sys.stderr, flush=True))
    with open(log_path, "w") as log, _local_run_id(log_path), _warnings_to(log):
        reporter = StepReporter(log, say)
        real_stdout = sys.stdout
        sys.stdout = reporter
        try:
            task = build()(
                input_uri=input_uri,
                registry_root=os.path.join(workdir, "registry"),
                dataset_name=dataset_name,
                **params,
            )
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}; the full log is {log_path}") from None
        finally:
            sys.stdout = real_stdout
            reporter.flush()
    summary = json.loads(task.output)
    summary["steps"] = reporter.steps
    summary["log"] = log_path
    return summary
