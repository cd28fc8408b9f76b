"""The ``data-service`` commands: a tf.data service dispatcher or worker (``--input-service``)."""

from __future__ import annotations

from typing import Any

import click

from tfrecord_suite.cli import options
from tfrecord_suite.cli.common import friendly_errors
from tfrecord_suite.train.service import (
    DispatcherOptions,
    WorkerOptions,
    run_dispatcher,
    run_worker,
)


@click.group("data-service")
def data_service() -> None:
    """Serve the train step's input pipeline: a tf.data service dispatcher or worker."""


@data_service.command()
@options.dataclass_options(DispatcherOptions)
@friendly_errors
def dispatcher(**values: Any) -> None:
    """Run a dispatcher until SIGTERM (what k8s/data-service and --input-service local:N run)."""
    run_dispatcher(options.build(DispatcherOptions, values))


@data_service.command()
@options.dataclass_options(WorkerOptions)
@friendly_errors
def worker(**values: Any) -> None:
    """Run a worker until SIGTERM: it reads, parses and decodes its share of every input."""
    run_worker(options.build(WorkerOptions, values))
