"""Run the pipeline DAG on this machine with ``kfp.local`` (SubprocessRunner, no Docker).

Everything lands under one working folder that stands in for a bucket::

    <workdir>/registry/<dataset>/<version>/   published dataset versions
    <workdir>/pipeline_root/                  kfp artifacts: staged shards, models, metrics
"""

from __future__ import annotations

import json
import os
from typing import Any

from tfrecord_suite import storage


def run_local(*, input_uri: str, workdir: str, dataset_name: str, **params: Any) -> dict[str, Any]:
    """Run :func:`~tfrecord_suite.pipelines.training_pipeline.tfrecord_suite_pipeline` locally.

    Args:
        input_uri: Raw data.
        workdir: Local folder standing in for the bucket.
        dataset_name: Dataset name in ``<workdir>/registry``.
        **params: Other pipeline parameters (``input_format``, ``epochs``...).

    Returns:
        The report step's summary: dataset ref and folder, model and export folders, metrics.

    """
    from kfp import local

    from tfrecord_suite.pipelines.training_pipeline import tfrecord_suite_pipeline

    workdir = storage.normalize(workdir)
    os.makedirs(workdir, exist_ok=True)
    local.init(
        runner=local.SubprocessRunner(use_venv=False),
        pipeline_root=os.path.join(workdir, "pipeline_root"),
        raise_on_error=True,
    )
    task = tfrecord_suite_pipeline(
        input_uri=storage.normalize(input_uri),
        registry_root=os.path.join(workdir, "registry"),
        dataset_name=dataset_name,
        **params,
    )
    return json.loads(task.output)
