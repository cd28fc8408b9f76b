"""Pipeline commands, part two: ``compile``, ``submit`` and ``retrain`` (the kfp side)."""

from __future__ import annotations

import sys
from typing import Any

import click

from tfrecord_suite.cli import options
from tfrecord_suite.cli.common import emit, friendly_errors, json_option
from tfrecord_suite.kfp.compile import COMPILED_YAML


def _placement_cls() -> type:
    from tfrecord_suite.launch.placement import Placement

    return Placement


def _deployment_cls() -> type:
    from tfrecord_suite.kfp.placement import Deployment

    return Deployment


@click.command("compile")
@click.option(
    "--output",
    default=COMPILED_YAML,
    show_default=True,
    help="Where to write the pipeline YAML.",
)
@options.dataclass_options(_placement_cls())
@options.dataclass_options(_deployment_cls())
@json_option
@friendly_errors
def compile_(output: str, as_json: bool, **values: Any) -> None:
    """Compile the pipeline to YAML for the Kubeflow UI (needs only kfp).

    The placement flags put the train step on GPU or TPU nodes (node selector, toleration,
    accelerator limit); /dev/shm is always an in-memory volume.
    """
    from tfrecord_suite.kfp.compile import compile_pipeline

    path = compile_pipeline(
        output, options.build(_placement_cls(), values), options.build(_deployment_cls(), values)
    )
    emit({"output": path}, as_json, lambda o: f"wrote {o['output']}")


@click.command()
@click.option("--host", required=True, help="Kubeflow Pipelines API endpoint.")
@click.option("--experiment", default="tfrecord-suite", show_default=True)
@click.option("--param", "params", multiple=True, help="Pipeline parameter k=v (repeatable).")
@click.option(
    "--schedule",
    default=None,
    help="Cron expression with six fields, seconds first ('0 0 3 * * *'): a recurring run.",
)
@click.option(
    "--pipeline-root",
    default=None,
    help="Artifact root for this run (gs://, s3:// or minio://); default: the cluster's.",
)
@click.option("--run-name", default=None, help="Run (or recurring run) name.")
@click.option("--pipeline-name", default="tfrecord-suite", show_default=True)
@click.option("--wait/--no-wait", default=False, help="Wait for the run to finish.")
@click.option("--timeout", default=3600, show_default=True, help="Seconds to wait with --wait.")
@click.option(
    "--service-account",
    default="tfrecord-suite",
    show_default=True,
    help="Kubernetes service account of the run's pods (Workload Identity; empty: KFP's default).",
)
@options.dataclass_options(_placement_cls())
@options.dataclass_options(_deployment_cls())
@json_option
@friendly_errors
def submit(
    host: str,
    experiment: str,
    params: tuple[str, ...],
    schedule: str | None,
    run_name: str | None,
    pipeline_name: str,
    wait: bool,
    timeout: int,
    service_account: str,
    pipeline_root: str | None,
    as_json: bool,
    **placement: Any,
) -> None:
    """Upload a pipeline version and start a run (or a recurring run) with kfp.Client.

    The placement, image and resource flags are those of ``compile``: the uploaded version is
    compiled with them.
    """
    from tfrecord_suite.kfp.submit import parse_params, submit_pipeline

    result = submit_pipeline(
        placement=options.build(_placement_cls(), placement),
        deployment=options.build(_deployment_cls(), placement),
        pipeline_root=pipeline_root,
        service_account=service_account,
        host=host,
        experiment=experiment,
        params=parse_params(params),
        schedule=schedule,
        run_name=run_name,
        pipeline_name=pipeline_name,
        wait=wait,
        timeout=timeout,
    )
    emit(result, as_json)
    if wait and result.get("state") not in (None, "SUCCEEDED"):
        sys.exit(1)


@click.command()
@click.option("--input", "input_uri", required=True, help="Raw data: file, folder, glob or gs://.")
@click.option("--registry", "registry_root", required=True, help="Dataset registry root.")
@click.option("--dataset", required=True, help="Dataset name.")
@click.option("--host", required=True, help="Kubeflow Pipelines API endpoint.")
@click.option(
    "--if-changed",
    is_flag=True,
    help="Submit only when the input fingerprint differs from the latest version's.",
)
@click.option("--experiment", default="tfrecord-suite-retrain", show_default=True)
@click.option("--param", "params", multiple=True, help="Other pipeline parameter k=v.")
@click.option("--wait/--no-wait", default=False, help="Wait for the run to finish.")
@json_option
@friendly_errors
def retrain(
    input_uri: str,
    registry_root: str,
    dataset: str,
    host: str,
    if_changed: bool,
    experiment: str,
    params: tuple[str, ...],
    wait: bool,
    as_json: bool,
) -> None:
    """Submit the pipeline for new data (from CI or a CronJob); skip unchanged data."""
    from tfrecord_suite.kfp.retrain import retrain as run_retrain
    from tfrecord_suite.kfp.submit import parse_params, submit_pipeline

    result = run_retrain(
        input_uri=input_uri,
        registry_root=registry_root,
        dataset=dataset,
        if_changed=if_changed,
        params=parse_params(params),
        submit=lambda p: submit_pipeline(host=host, experiment=experiment, params=p, wait=wait),
    )
    emit(
        result, as_json, lambda r: ("submitted: " if r["submitted"] else "skipped: ") + r["reason"]
    )
