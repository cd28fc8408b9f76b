"""The ``data-service`` commands: a tf.data service dispatcher or worker (``--input-service``).

The CLI of :mod:`tfrecord_suite.train.service` (the servers); a service's Kubernetes objects are
:mod:`tfrecord_suite.launch.data_service_k8s`.
"""

from __future__ import annotations

from typing import Any

import click

from tfrecord_suite.cli import options
from tfrecord_suite.cli.common import emit, friendly_errors, json_option
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


@data_service.command()
@click.option(
    "--name",
    default="tfrs-data",
    show_default=True,
    help="The Service's name; the StatefulSets are <name>-dispatcher and <name>-worker.",
)
@click.option("--workers", default=2, show_default=True, help="Worker pods.")
@click.option("--image", default="", help="The suite's image; empty: the default component image.")
@click.option(
    "--output",
    default="k8s/data-service",
    show_default=True,
    help="Folder the manifests go to (beside a kustomization.yaml of your own).",
)
@click.option("--check", is_flag=True, help="Write nothing; exit 1 when a file differs.")
@json_option
@friendly_errors
def manifests(name: str, workers: int, image: str, output: str, check: bool, as_json: bool) -> None:
    """Write a tf.data service's Kubernetes manifests (what k8s/data-service holds)."""
    from tfrecord_suite import images
    from tfrecord_suite.launch.data_service_k8s import write_manifests

    changed = write_manifests(output, name, workers, image or images.COMPONENT_IMAGE, check)
    emit(
        {"changed": changed},
        as_json,
        lambda r: "\n".join(r["changed"]) or "up to date",
    )
    if check and changed:
        raise SystemExit(1)
