"""Compile the ready pipelines to the YAML the Kubeflow UI uploads (imports only kfp)."""

from __future__ import annotations

import os
from typing import Any

from tfrecord_suite.kfp.task_placement import Deployment
from tfrecord_suite.launch.placement import Placement

#: The pipeline ``tfrecord-suite run``, ``submit`` and ``retrain`` use unless told otherwise.
DEFAULT_PIPELINE = "retraining"
#: Where ``tfrecord-suite compile`` writes the retraining pipeline by default, relative to the
#: working directory: the repository keeps every compiled pipeline in pipelines/.
COMPILED_YAML = os.path.join("pipelines", f"{DEFAULT_PIPELINE}.yaml")


def build(
    pipeline: str = DEFAULT_PIPELINE,
    placement: Placement | None = None,
    deployment: Deployment | None = None,
) -> Any:
    """The ready pipeline ``pipeline`` (:mod:`tfrecord_suite.pipelines`), placed and deployed."""
    from tfrecord_suite import pipelines

    return pipelines.module(pipeline).build_pipeline(placement, deployment)


def compile_pipeline(
    output: str = COMPILED_YAML,
    placement: Placement | None = None,
    deployment: Deployment | None = None,
    pipeline: str = DEFAULT_PIPELINE,
) -> str:
    """Write the YAML of ready pipeline ``pipeline`` and return its path.

    The train step is placed as ``placement`` says; ``deployment`` names the images, the
    steps' CPU and memory requests and whether Kubeflow may cache.
    """
    from kfp import compiler

    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    compiler.Compiler().compile(build(pipeline, placement, deployment), package_path=output)
    return output
