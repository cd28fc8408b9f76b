"""Which Beam runner runs the shard step, and whether its workers see this machine's disk.

Everything after ``--`` reaches Beam unchanged, with one exception: a run that names no runner
(or the DirectRunner) gets one chosen here. Beam's DirectRunner first tries Prism, downloading
its binary at run time when ``--prism_location`` is not given, and falls back to the in-process
FnApiRunner when that fails. This step never downloads a runner: with ``--prism_location`` it
runs on Prism (:data:`PRISM`), without it on the FnApiRunner, and says which.

Local paths are fine where the Python code of the pipeline (Beam's SDK harness) runs on this
machine: in this process (the in-process runners), or for a portable runner (Prism, Flink,
Spark, a job server) whose SDK environment is ``LOOPBACK`` (the harness in this process) or
``PROCESS`` (processes the runner starts on its own machines) while that runner runs here: a job
endpoint, Flink master or Spark master on this machine, or the embedded ``[local]``/``local[N]``
ones. Dataflow, a ``DOCKER`` environment (the default of a job server: containers see none of
this disk) or a remote cluster need ``gs://`` paths.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

from tfrecord_suite.errors import UserError
from tfrecord_suite.io import storage

_LOG = logging.getLogger(__name__)

#: Runners that run the pipeline inside this process ("": none named, Beam's DirectRunner).
IN_PROCESS_RUNNERS = (
    "",
    "directrunner",
    "fnapirunner",
    "interactiverunner",
    "bundlebaseddirectrunner",
)
#: Portable runners and the SDK environment each takes when ``--environment_type`` is not given
#: (Beam's own defaults: LOOPBACK for Prism, and for Flink and Spark on an embedded cluster).
PORTABLE_RUNNERS = {
    "prismrunner": "LOOPBACK",
    "flinkrunner": "LOOPBACK",
    "sparkrunner": "LOOPBACK",
    "portablerunner": "DOCKER",
}
#: SDK environments whose workers run on the runner's machine, not in a container.
LOCAL_ENVIRONMENTS = ("LOOPBACK", "PROCESS")
#: Options naming where a portable runner runs, and the values that mean "embedded, here".
_WHERE_OPTIONS = {
    "job_endpoint": ("embed",),
    "flink_master": ("[local]", "[auto]"),
    "spark_master_url": ("local",),
}
_LOOPBACK_HOST = re.compile(r"^(localhost|127(\.\d{1,3}){3}|\[?::1\]?)$", re.I)
PRISM = "PrismRunner"
IN_PROCESS = "FnApiRunner"


def beam_option(beam_args: Sequence[str], name: str) -> str | None:
    """The value of ``--name`` in Beam options (``--name=v`` or ``--name v``); None when absent.

    The last one wins, as in Beam's own parser.
    """
    args = [str(a) for a in beam_args]
    value = None
    for i, arg in enumerate(args):
        if arg.startswith(f"--{name}="):
            value = arg.split("=", 1)[1]
        elif arg == f"--{name}" and i + 1 < len(args):
            value = args[i + 1]
    return value


def beam_runner(beam_args: Sequence[str]) -> str:
    """The ``--runner`` named in Beam options (``""`` when none: the DirectRunner)."""
    return beam_option(beam_args, "runner") or ""


def _short_name(runner: str) -> str:
    # Beam also takes a runner's full class path (apache_beam.runners...FlinkRunner)
    return runner.rsplit(".", 1)[-1].lower()


def _host_is_here(value: str, embedded: tuple[str, ...]) -> bool:
    """Whether a job endpoint or master (``host:port``, ``scheme://host:port/``) is this machine."""
    value = value.strip()
    if value.lower() in embedded or re.match(r"^local(\[.+\])?$", value):
        return True
    address = re.sub(r"^[a-z]+://", "", value, flags=re.I).split("/", 1)[0]
    host = re.sub(r":\d+$", "", address)
    return bool(_LOOPBACK_HOST.match(address) or _LOOPBACK_HOST.match(host))


def where_workers_run(beam_args: Sequence[str]) -> str | None:
    """Why the pipeline's workers may not see this machine's disk; None when they do."""
    runner = beam_runner(beam_args)
    name = _short_name(runner)
    if name in IN_PROCESS_RUNNERS:
        return None
    if name not in PORTABLE_RUNNERS:
        return f"--runner {runner} runs on remote workers"
    environment = (beam_option(beam_args, "environment_type") or PORTABLE_RUNNERS[name]).upper()
    if environment not in LOCAL_ENVIRONMENTS:
        return f"--runner {runner} runs its SDK workers in {environment} environments"
    for option, embedded in _WHERE_OPTIONS.items():
        value = beam_option(beam_args, option)
        if value is not None and not _host_is_here(value, embedded):
            return f"--runner {runner} runs on --{option} {value}"
    return None


def runs_on_this_machine(beam_args: Sequence[str]) -> bool:
    """Whether the pipeline's Python code runs on this machine (see the module docstring)."""
    return where_workers_run(beam_args) is None


def check_paths_reach_runner(input_uri: str, output: str, beam_args: Sequence[str]) -> None:
    """Refuse local paths when the runner's workers cannot see this machine's disk.

    Its workers would read an input that is not there, or write shards on their own disks,
    where nobody finds them.

    Raises:
        UserError: Naming the path and the runner.

    """
    where = where_workers_run(beam_args)
    if where is None:
        return
    hint = ""
    if _short_name(beam_runner(beam_args)) in PORTABLE_RUNNERS:
        hint = " (or run it on this machine with --environment_type LOOPBACK or PROCESS)"
    for flag, uri in (("--input", input_uri), ("--output", output)):
        if not storage.is_remote(uri):
            raise UserError(
                f"{flag} {uri} is a local path but {where} that cannot see this machine's disk: "
                f"use a gs:// or s3:// path{hint}"
            )


def check_runner(beam_args: Sequence[str]) -> None:
    """Refuse a runner the step would have to download first.

    Raises:
        UserError: ``--runner PrismRunner`` without ``--prism_location``.

    """
    if _short_name(beam_runner(beam_args)) == "prismrunner" and not beam_option(
        beam_args, "prism_location"
    ):
        raise UserError(
            "--runner PrismRunner needs --prism_location PATH, a prism binary built at the Beam "
            "SDK's version (go build github.com/apache/beam/sdks/v2/go/cmd/prism); the shard "
            "step never downloads one at run time"
        )


def runner_args(beam_args: Sequence[str]) -> list[str]:
    """The Beam options the pipeline runs with: ``beam_args`` with the runner made explicit.

    No runner (or the DirectRunner) becomes :data:`PRISM` when ``--prism_location`` names a
    binary, else :data:`IN_PROCESS`; Beam then attempts no download. Prism logs at the level
    this module logs at unless ``--prism_log_level`` says otherwise.

    Raises:
        UserError: See :func:`check_runner`.

    """
    check_runner(beam_args)
    args = [str(a) for a in beam_args]
    prism_location = beam_option(args, "prism_location")
    if _short_name(beam_runner(args)) in ("", "directrunner"):
        chosen = PRISM if prism_location else IN_PROCESS
        _LOG.info(
            "running on the %s%s",
            chosen,
            f" at {prism_location}" if prism_location else " in this process (no --prism_location)",
        )
        args = [*_without_option(args, "runner"), f"--runner={chosen}"]
    if prism_location and beam_option(args, "prism_log_level") is None:
        # Prism logs every job's start and end at INFO; a normal run shows only its problems
        args.append(f"--prism_log_level={'info' if _LOG.isEnabledFor(logging.INFO) else 'warn'}")
    return args


def _without_option(args: list[str], name: str) -> list[str]:
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg == f"--{name}":
            skip = True
        elif not arg.startswith(f"--{name}="):
            out.append(arg)
    return out
