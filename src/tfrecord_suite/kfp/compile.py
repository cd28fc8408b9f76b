"""Compile the pipeline to the YAML the Kubeflow UI uploads (imports only kfp)."""

from __future__ import annotations

import os

from tfrecord_suite.kfp.placement import Deployment
from tfrecord_suite.launch.placement import Placement

#: Where ``tfrecord-suite compile`` writes by default, relative to the working directory: the
#: repository keeps the compiled pipeline there, for the Kubeflow UI and for review.
COMPILED_YAML = os.path.join("pipelines", "tfrecord_suite_pipeline.yaml")


def compile_pipeline(
    output: str = COMPILED_YAML,
    placement: Placement | None = None,
    deployment: Deployment | None = None,
) -> str:
    """Write the pipeline YAML and return its path.

    The train step is placed as ``placement`` says; ``deployment`` names the images and the
    steps' CPU and memory requests.
    """
    from kfp import compiler

    from tfrecord_suite.kfp.pipeline import build_pipeline

    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    compiler.Compiler().compile(build_pipeline(placement, deployment), package_path=output)
    return output
