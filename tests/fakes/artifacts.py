"""The kfp side of a step called as a plain function: an output artifact's stand-in (what the
tasks use of ``dsl.Artifact``: uri, path, metadata, logged metrics) and the train step called as
its component calls it. Not a Kubernetes stand-in: where the step launches a job, the tests point
it at the real API server (tests/realparts)."""

from __future__ import annotations

import os
from typing import Any


class Artifact:
    """The part of a kfp output artifact the tasks use (uri, path, metadata, logged metrics)."""

    def __init__(self, uri, metadata=None, path=None):
        self.uri = uri
        self.path = uri if path is None else path
        self.metadata = dict(metadata or {})
        self.logged = {}

    def log_metric(self, k, v):
        self.logged[k] = v

    def log_confusion_matrix(self, classes, matrix):
        self.logged["confusion"] = (classes, matrix)


def train_step(dataset_ref: str, out: Any, **overrides: Any) -> dict[str, Artifact]:
    """Call the kfp train step's function as its component does, with small settings.

    The artifacts' local paths are under ``out``; any argument of ``training_steps.train_step``,
    artifacts included, can be overridden. ``run_id``, ``pod_name``, ``pod_uid`` and
    ``service_account`` are what the downward API would tell the step's pod (environment
    variables, see tfrecord_suite.podinfo). Returns the four artifacts by name.
    """
    import dataclasses
    from unittest import mock

    from tfrecord_suite import podinfo
    from tfrecord_suite.steps import training as training_steps

    keys = [f.name for f in dataclasses.fields(podinfo.PodInfo)]
    pod = {
        env: overrides.pop(key)
        for env, key in zip(podinfo.FIELDS, keys, strict=True)
        if key in overrides
    }

    artifacts = {
        "model": Artifact(os.path.join(str(out), "model")),
        "metrics": Artifact(""),
        "classification_metrics": Artifact(""),
        "report": Artifact(os.path.join(str(out), "report.md")),
    }
    for name in artifacts:
        if name in overrides:
            artifacts[name] = overrides.pop(name)
    with mock.patch.dict(os.environ, pod):
        training_steps.train_step(
            **{
                "dataset_ref": dataset_ref,
                "dataset_digest": "",
                "strategy": "auto",
                "cpu_devices": 1,
                "epochs": 1,
                "batch_size": 8,
                "learning_rate": 0.01,
                "model_fn": "",
                **artifacts,
                **overrides,
            }
        )
    return artifacts
