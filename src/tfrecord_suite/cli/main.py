"""``tfrecord-suite``: the command group and its commands, one module per group.

Every step command maps its flags one-to-one onto the step's config dataclass (see
:mod:`tfrecord_suite.cli.options`). Known errors print one line (``error: ...``) and exit 2;
there is no traceback unless ``--debug`` is given (:mod:`tfrecord_suite.cli.common`).
"""

from __future__ import annotations

import logging
import os
import signal

import click

from tfrecord_suite import __version__, tf_import
from tfrecord_suite.cli.data_service import data_service
from tfrecord_suite.cli.images import images_group
from tfrecord_suite.cli.kfp import compile_, components_, release_files_, retrain, submit
from tfrecord_suite.cli.models import models
from tfrecord_suite.cli.pipeline import demo, run, sample_data
from tfrecord_suite.cli.shard import shard
from tfrecord_suite.cli.train import train
from tfrecord_suite.cli.version import version


def exit_on_sigterm() -> None:
    """End on SIGTERM (exit status 143) where nothing else handles it.

    A container's first process gets no default action for a signal it does not handle: a
    job's node (``tfrecord-suite train`` as the pod's command) would then keep training
    through its pod's deletion until the kubelet kills it at the grace period's end (30 s:
    seen on the one-node cluster, where a cancelled run's node pods outlived their TrainJob so).
    """
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, _exit_143)


def _exit_143(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="tfrecord-suite")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@click.option("-v", "--verbose", is_flag=True, help="Log at INFO level.")
def main(debug: bool, verbose: bool) -> None:
    """Raw data -> sharded TFRecords -> versioned datasets -> distributed training, on Kubeflow."""
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    if not verbose:
        # Beam warns each time it starts or stops a runner's process (Prism, a job server);
        # a normal run on Prism would print both lines
        logging.getLogger("apache_beam.utils.subprocess_server").setLevel(logging.ERROR)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    exit_on_sigterm()
    tf_import.install()  # the lines TensorFlow's import prints at any log level


main.add_command(shard)
main.add_command(version)
main.add_command(models)
main.add_command(train)
main.add_command(run)
main.add_command(demo)
main.add_command(sample_data)
main.add_command(compile_)
main.add_command(components_)
main.add_command(release_files_)
main.add_command(submit)
main.add_command(retrain)
main.add_command(images_group)
main.add_command(data_service)
