"""Submitting the pipeline to a Kubeflow Pipelines endpoint with ``kfp.Client``."""

from __future__ import annotations

import datetime as dt
import functools
import json
import os
import tempfile
from collections.abc import Sequence
from typing import Any

from tfrecord_suite.errors import UserError


@functools.cache
def parameter_types(pipeline: str) -> dict[str, str]:
    """Each parameter of ready pipeline ``pipeline`` and its kfp type (``Integer``, ``String``...).

    Building a pipeline takes seconds; its parameters do not depend on where it is placed or
    deployed, so one build per pipeline and process answers every question.
    """
    from tfrecord_suite.kfp.compile import build

    inputs = build(pipeline).component_spec.inputs or {}
    return {name: spec.type for name, spec in inputs.items()}


def parse_params(pairs: Sequence[str], pipeline: str = "retraining") -> dict[str, Any]:
    """``["k=v", ...]`` -> ``{k: v}``, typed by the ready pipeline's parameter declarations.

    Raises:
        UserError: A pair without ``=``, an unknown parameter, or a value of the wrong type.

    """
    inputs = parameter_types(pipeline)
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise UserError(f"--param {pair!r}: write name=value")
        if key not in inputs:
            raise UserError(f"--param {key!r} is not a pipeline parameter; known: {sorted(inputs)}")
        kind = inputs[key]
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
            cannot reach (local paths, or stores other than gs:// and s3://), or a five-field
            cron.

    """
    from tfrecord_suite.io import storage

    if pipeline_root and not pipeline_root.startswith(PIPELINE_ROOT_SCHEMES):
        raise UserError(
            f"--pipeline-root {pipeline_root}: Kubeflow's launcher stores artifacts under "
            f"{', '.join(PIPELINE_ROOT_SCHEMES)} roots only; give one of those (or none, for the "
            "cluster's default)"
        )
    for key in ("input_uri", "registry_root", "model_registry", "dataset_ref"):
        value = params.get(key)
        if not value:
            continue
        storage.check_reachable(value, f"--param {key}")
        if not storage.is_remote(value):
            raise UserError(
                f"--param {key}={value} is a local path: the pipeline's pods cannot see this "
                "machine's disk; give a gs:// or s3:// URI"
            )
    if schedule is not None and len(schedule.split()) != 6:
        raise UserError(
            f"--schedule {schedule!r}: Kubeflow's recurring runs take six cron fields, seconds "
            f"first (e.g. '0 0 3 * * *' for 03:00 daily); for this one: '0 {schedule}'"
        )


def submit_pipeline(
    *,
    endpoint: Any,
    experiment: str,
    params: dict[str, Any],
    schedule: str | None = None,
    run_name: str | None = None,
    pipeline: str = "retraining",
    pipeline_name: str = "",
    wait: bool = False,
    timeout: int = 3600,
    placement: Any = None,
    service_account: str = "",
    deployment: Any = None,
    pipeline_root: str | None = None,
) -> dict[str, Any]:
    """Upload the compiled pipeline as a version (unless it is there) and start a run.

    ``endpoint`` (a :class:`~tfrecord_suite.kfp.endpoint.KfpEndpoint`) says where the API is,
    which namespace runs go to and how to authenticate. ``placement`` (a
    :class:`~tfrecord_suite.launch.placement.Placement`) compiles the train step for GPUs/TPUs
    as ``tfrecord-suite compile`` would, and ``deployment`` (a
    :class:`~tfrecord_suite.kfp.task_placement.Deployment`) names the images and the steps' CPU and
    memory. ``pipeline`` names the ready pipeline (``retraining``, ``data``, ``training``),
    uploaded as ``pipeline_name`` (default: its own name). Pipeline versions are named after
    their compiled content, so submitting the same
    pipeline again reuses its version instead of stacking identical ones. The run's pods use
    ``service_account``, or the one Kubeflow runs pipelines as when empty (``pipeline-runner``
    standalone, ``default-editor`` in a profile): that account holds what Kubeflow's driver,
    launcher and executor need (k8s/ binds the job launcher's Role to it).
    ``pipeline_root`` overrides the cluster's default artifact root.

    Returns:
        IDs of the pipeline, version, experiment and run (or recurring run), the backend's
        version and the namespace, and the final run state when ``wait``.

    Raises:
        UserError: What a cluster run could not do (see :func:`check_submission`), or a
            backend too old for the compiled pipeline (:func:`check_backend`).

    """
    from tfrecord_suite import pipelines
    from tfrecord_suite.kfp.endpoint import connect

    check_submission(params, pipeline_root, schedule)
    pipeline_name = pipeline_name or pipelines.module(pipeline).NAME
    session = connect(endpoint)
    client, namespace = session.client, session.namespace
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
    pipeline_id, version_id = _upload(session, pipeline, pipeline_name, placement, deployment)
    exp = client.create_experiment(experiment, namespace=namespace)
    out: dict[str, Any] = {
        "pipeline_id": pipeline_id,
        "version_id": version_id,
        "experiment_id": exp.experiment_id,
        "backend": session.backend.version,
        "namespace": namespace,
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
    session: Any, pipeline: str, pipeline_name: str, placement: Any, deployment: Any
) -> tuple[str, str]:
    """Compile ``pipeline``; find or upload it as a version of the pipeline ``pipeline_name``.

    Versions are named ``<package version>-<digest of the compiled YAML>``, so the same
    pipeline compiled for the same images and placement (a nightly ``retrain``) reuses its
    version instead of uploading it again. A new pipeline gets that version at once: the
    upload that creates a pipeline names its first version after the pipeline (KFP's API
    server, ``pipeline_upload_server.go``, takes no version name there), which a later
    submission could not find by its content.

    Returns:
        The pipeline's ID and the version's.

    """
    import hashlib

    from tfrecord_suite import __version__
    from tfrecord_suite.kfp.compile import compile_pipeline

    client, namespace = session.client, session.namespace
    with tempfile.TemporaryDirectory() as tmp:
        package = compile_pipeline(
            os.path.join(tmp, "pipeline.yaml"), placement, deployment, pipeline
        )
        with open(package, "rb") as fh:
            version_name = f"{__version__}-{hashlib.sha256(fh.read()).hexdigest()[:12]}"
        pipeline_id = _find(
            client.list_pipelines(filter=_named(pipeline_name), namespace=namespace),
            "pipelines",
            "pipeline_id",
        )
        if pipeline_id is None:
            pipeline_id = client.upload_pipeline(
                package,
                pipeline_name=pipeline_name,
                description="tfrecord-suite pipeline",
                namespace=namespace,
            ).pipeline_id
        existing = _find(
            client.list_pipeline_versions(pipeline_id, filter=_named(version_name)),
            "pipeline_versions",
            "pipeline_version_id",
        )
        if existing is not None:
            return pipeline_id, existing
        version = client.upload_pipeline_version(
            package, pipeline_version_name=version_name, pipeline_id=pipeline_id
        )
        return pipeline_id, version.pipeline_version_id


def _named(name: str) -> str:
    """A v2beta1 list filter: ``display_name`` equals ``name``."""
    return json.dumps(
        {"predicates": [{"operation": "EQUALS", "key": "display_name", "stringValue": name}]}
    )


def _find(listing: Any, items: str, key: str) -> str | None:
    """The ID (``key``) of the first of ``listing.<items>``, or None."""
    found = getattr(listing, items, None) or []
    return getattr(found[0], key) if found else None
