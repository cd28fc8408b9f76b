"""The suite's ready pipelines: each a Python definition here and its compiled YAML beside it.

=============  ==================  ===========================================================
pipeline       files               DAG
=============  ==================  ===========================================================
retraining     retraining.py/yaml  fingerprint -> shard -> version -> train -> evaluate ->
                                   register -> [gate] promote -> report (``tfrecord-suite run``)
data           data.py/yaml        fingerprint -> shard -> version
training       training.py/yaml    resolve_dataset -> train -> evaluate -> register -> [gate]
                                   promote -> report
=============  ==================  ===========================================================

This folder is installed as the package ``tfrecord_suite.pipelines`` (``pyproject.toml`` maps
it), so ``tfrecord-suite compile --pipeline data`` and your own code
(``from tfrecord_suite.pipelines import data``) use the definitions you read here. Each
module's ``build_pipeline(placement, deployment)`` returns the pipeline compiled for a
placement and a set of images; ``make compile`` writes each ``<name>.yaml`` on the default
images, and a test fails when one is stale.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

#: The ready pipelines, by name (the module of this package that defines each).
PIPELINES = ("retraining", "data", "training")


def module(name: str) -> Any:
    """The module defining pipeline ``name`` (its ``NAME`` and ``build_pipeline``)."""
    if name not in PIPELINES:
        from tfrecord_suite.errors import UserError

        raise UserError(f"--pipeline {name!r}: choose one of {', '.join(PIPELINES)}")
    return importlib.import_module(f"{__name__}.{name}")


def compiled_path(name: str, root: str = "pipelines") -> str:
    """Where the compiled YAML of pipeline ``name`` is kept, relative to the repository root."""
    return os.path.join(root, f"{name}.yaml")
