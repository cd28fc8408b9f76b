"""Submitting the pipeline to a Kubeflow Pipelines endpoint with ``kfp.Client``."""

from __future__ import annotations

import datetime as dt
import json
import os
import tempfile
from collections.abc import Sequence
from typing import Any

from tfrecord_suite.errors import UserError


def parse_params(pairs: Sequence[str]) -> dict[str, Any]:
    """``["k=v", ...]`` -> ``{k: v}``, typed by the pipeline's parameter declarations.

    Raises:
        ValueError: A pair without ``=``, an unknown parameter, or a value of the wrong type.

    """
    from tfrecord_suite.kfp.pipeline import tfrecord_suite_pipeline

    inputs = tfrecord_suite_pipeline.component_spec.inputs or {}
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise UserError(f"--param {pair!r}: write name=value")
        if key not in inputs:
            raise UserError(f"--param {key!r} is not a pipeline parameter; known: {sorted(inputs)}")
        kind = inputs[key].type
        try:
            if kind == "Integer":
                out[key] = int(value)
            elif kind == "Float":
                out[key] = float(value)
            elif kind == "Boolean":
                if value.lower() not in ("true", "false", "1", "0"):
                    raise ValueError(value)
                out[key] = value.lower() in ("true", "1")
            elif kind == "List":
                out[key] = json.loads(value)
                if not isinstance(out[key], list):
                    raise ValueError(value)
            else:
                out[key] = value
        except ValueError:
            raise UserError(f"--param {key}={value!r}: expected a {kind}") from None
    return out


#: The pipeline-root schemes the KFP launcher maps to local paths (/gcs, /s3, /minio).
PIPELINE_ROOT_SCHEMES = ("gs://", "s3://", "minio://")


def check_submission(
    params: dict[str, Any], pipeline_root: str | None, schedule: str | None
) -> None:
    """Refuse, before anything is uploaded, what a cluster run could not do.

    Raises:
        UserError: A pipeline root the launcher cannot map, data or registries the steps' pods
            cannot reach (local paths, or stores other than gs://), or a five-field cron.

    """
    from tfrecord_suite.io import storage

    if pipeline_root and not pipeline_root.startswith(PIPELINE_ROOT_SCHEMES):
        raise UserError(
            f"--pipeline-root {pipeline_root}: Kubeflow's launcher stores artifacts under "
            f"{', '.join(PIPELINE_ROOT_SCHEMES)} roots only; give one of those (or none, for the "
            "cluster's default)"
        )
    for key in ("input_uri", "registry_root", "model_registry"):
        value = params.get(key)
        if not value:
            continue
        storage.check_reachable(value, f"--param {key}")
        if not storage.is_gcs(value):
            raise UserError(
                f"--param {key}={value} is a local path: the pipeline's pods cannot see this "
                "machine's disk; give a gs:// URI"
            )
    if schedule is not None and len(schedule.split()) != 6:
        raise UserError(
            f"--schedule {schedule!r}: Kubeflow's recurring runs take six cron fields, seconds "
            f"first (e.g. '0 0 3 * * *' for 03:00 daily); for this one: '0 {schedule}'"
        )


def submit_pipeline(
    *,
    host: str,
    experiment: str,
    params: dict[str, Any],
    schedule: str | None = None,
    run_name: str | None = None,
    pipeline_name: str = "tfrecord-suite",
    wait: bool = False,
    timeout: int = 3600,
    client: Any = None,
    placement: Any = None,
    service_account: str = "tfrecord-suite",
    deployment: Any = None,
    pipeline_root: str | None = None,
) -> dict[str, Any]:
    """Upload the compiled pipeline as a new version and create a run or a recurring run.

    ``placement`` (a :class:`~tfrecord_suite.launch.placement.Placement`) compiles the train
    step for GPUs/TPUs as ``tfrecord-suite compile`` would, and ``deployment`` (a
    :class:`~tfrecord_suite.kfp.placement.Deployment`) names the images and the steps'
    CPU and memory; the run's pods use the Kubernetes ``service_account`` (Workload Identity to
    GCS, no keys). ``pipeline_root`` overrides the cluster's default artifact root.

    Returns:
        IDs of the pipeline, version, experiment and run (or recurring run), and the final run
        state when ``wait``.

    """
    import kfp

    check_submission(params, pipeline_root, schedule)
    client = client or kfp.Client(host=host)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
    pipeline_id, version_id = _upload(client, pipeline_name, stamp, placement, deployment)
    exp = client.create_experiment(experiment)
    out: dict[str, Any] = {
        "pipeline_id": pipeline_id,
        "version_id": version_id,
        "experiment_id": exp.experiment_id,
    }
    # what a run and a recurring run of this version share
    common = {
        "experiment_id": exp.experiment_id,
        "job_name": run_name or f"{pipeline_name}-{stamp}",
        "pipeline_id": pipeline_id,
        "version_id": version_id,
        "params": params,
        "pipeline_root": pipeline_root,
        "service_account": service_account or None,
    }
    if schedule:
        job = client.create_recurring_run(
            **common, cron_expression=schedule, max_concurrency=1, no_catchup=True
        )
        out["recurring_run_id"] = job.recurring_run_id
        return out
    run = client.run_pipeline(**common)
    out["run_id"] = run.run_id
    if wait:
        done = client.wait_for_run_completion(run.run_id, timeout=timeout)
        out["state"] = str(done.state)
    return out


def _upload(
    client: Any, pipeline_name: str, stamp: str, placement: Any, deployment: Any
) -> tuple[str, str]:
    """Compile and upload the pipeline: a new pipeline, or a new version of the existing one.

    Returns:
        The pipeline's ID and the uploaded version's.

    """
    from tfrecord_suite import __version__
    from tfrecord_suite.kfp.compile import compile_pipeline

    with tempfile.TemporaryDirectory() as tmp:
        package = compile_pipeline(os.path.join(tmp, "pipeline.yaml"), placement, deployment)
        pipeline_id = client.get_pipeline_id(pipeline_name)
        if pipeline_id is None:
            pipeline = client.upload_pipeline(
                package, pipeline_name=pipeline_name, description="tfrecord-suite pipeline"
            )
            versions = client.list_pipeline_versions(pipeline.pipeline_id).pipeline_versions or []
            return pipeline.pipeline_id, versions[0].pipeline_version_id
        version = client.upload_pipeline_version(
            package, pipeline_version_name=f"{__version__}-{stamp}", pipeline_id=pipeline_id
        )
        return pipeline_id, version.pipeline_version_id
