"""Compile the pipeline to the YAML the Kubeflow UI uploads (imports only kfp)."""

from __future__ import annotations

import os

from tfrecord_suite.pipelines.placement import Placement

COMPILED_YAML = os.path.join(os.path.dirname(__file__), "tfrecord_suite_pipeline.yaml")


def compile_pipeline(output: str = COMPILED_YAML, placement: Placement | None = None) -> str:
    """Write the pipeline YAML (train step placed as ``placement`` says) and return its path."""
    from kfp import compiler

    from tfrecord_suite.pipelines.training_pipeline import build_pipeline

    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    compiler.Compiler().compile(build_pipeline(placement), package_path=output)
    return output
