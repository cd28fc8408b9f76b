"""Compile the pipeline to the YAML the Kubeflow UI uploads (imports only kfp)."""

from __future__ import annotations

import os

COMPILED_YAML = os.path.join(os.path.dirname(__file__), "tfrecord_suite_pipeline.yaml")


def compile_pipeline(output: str = COMPILED_YAML) -> str:
    """Write the pipeline YAML to ``output`` and return its path."""
    from kfp import compiler

    from tfrecord_suite.pipelines.training_pipeline import tfrecord_suite_pipeline

    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    compiler.Compiler().compile(tfrecord_suite_pipeline, package_path=output)
    return output
