"""What Kubeflow's launcher does with a step's outputs, applied to a ``kfp.local`` run.

After a step's code ends, the KFP launcher reads the executor output file the step wrote (the
same ``executor_output.json`` ``kfp.local`` leaves in each task's folder) and records each output
artifact, its metadata included, in ML Metadata (``backend/src/v2/component/launcher_v2.go``,
the metadata converted by ``StructValueToMLMDValue`` in ``backend/src/v2/metadata/converter.go``,
whose rule ``tfrecord_suite.steps.mlmd.mlmd_problems`` restates). ``kfp.local`` does neither, so a
step that would fail on a cluster after its work is done passes locally; these helpers apply the
rule to every artifact of every step of a local run.

KFP 2.17.0's own launcher runs every step of the ready pipelines on the one-node cluster
(tests/integration/test_kfp.py), which also checks the rule itself against it: a top-level null
fails the task, a nested one is stored, lists and structs wrapped, numbers as doubles. This
stays for what that does not cover in seconds: every component's local test and the local
DAG runs. What it cannot prove: anything of the launcher beyond the restated rule.
"""

from __future__ import annotations

import glob
import json
import os
from typing import Any

from tfrecord_suite.steps.mlmd import mlmd_problems

EXECUTOR_OUTPUT = "executor_output.json"


def executor_outputs(pipeline_root: str) -> dict[str, dict[str, Any]]:
    """``<run>/<task> -> executor output`` for every task under ``pipeline_root``."""
    out = {}
    for path in sorted(
        glob.glob(os.path.join(pipeline_root, "**", EXECUTOR_OUTPUT), recursive=True)
    ):
        with open(path) as fh:
            out[os.path.relpath(os.path.dirname(path), pipeline_root)] = json.load(fh)
    return out


def output_artifacts(pipeline_root: str) -> list[tuple[str, str, dict[str, Any]]]:
    """``(task, output name, artifact)`` for every output artifact of every task."""
    found = []
    for task, output in executor_outputs(pipeline_root).items():
        for name, listing in (output.get("artifacts") or {}).items():
            for artifact in listing.get("artifacts") or []:
                found.append((task, name, artifact))
    return found


def mlmd_rejections(pipeline_root: str) -> list[str]:
    """Every artifact metadata field the launcher would fail a task on, named by task."""
    return [
        f"{task} {name}: {problem}"
        for task, name, artifact in output_artifacts(pipeline_root)
        for problem in mlmd_problems(artifact.get("metadata") or {})
    ]


def mlmd_roundtrip(metadata: dict[str, Any]) -> dict[str, Any]:
    """Artifact metadata as a downstream step reads it after ML Metadata stored it.

    ``StructValueToMLMDValue`` stores a number as a double and a boolean as the integer 1 or
    0, and wraps a list or struct in ``{"list": ...}`` / ``{"struct": ...}``; ``toRuntimeArtifact``
    (the same file) gives doubles and integers back as numbers and the struct as stored, and
    nothing in ``backend/src/v2`` unwraps it.
    """
    out: dict[str, Any] = {}
    for key, value in metadata.items():
        if isinstance(value, int | float):  # a bool too: int_value 1 or 0, read as a number
            out[key] = float(value)
        elif isinstance(value, dict):
            out[key] = {"struct": value}
        elif isinstance(value, list | tuple):
            out[key] = {"list": list(value)}
        else:
            out[key] = value
    return out


#: A bucket's session as the launcher records it for the UI (``store_session_info``): the
#: profile's SeaweedFS on the one-node cluster, as ``run_lineage.py`` read it from a real run
SESSION_INFO = json.dumps(
    {
        "Provider": "minio",
        "Params": {"accessKeyKey": "accesskey", "disableSSL": "true",
                   "endpoint": "seaweedfs.kubeflow:9000", "fromEnv": "false",
                   "maxRetries": "5", "region": "minio", "secretKeyKey": "secretkey",
                   "secretName": "mlpipeline-minio-artifact"},
    },
    separators=(",", ":"),
)  # fmt: skip


def recorded(metadata: dict[str, Any], output_name: str) -> dict[str, Any]:
    """An output artifact's metadata as a downstream step reads it on Kubeflow: what
    :func:`mlmd_roundtrip` gives, plus the custom properties the launcher adds when it records
    the artifact where the step set none of that name (``RecordArtifact`` in
    ``backend/src/v2/metadata/client.go``): ``display_name`` (the output's name) and
    ``store_session_info`` (:data:`SESSION_INFO`)."""
    added = {"display_name": output_name, "store_session_info": SESSION_INFO}
    return mlmd_roundtrip({**added, **metadata})
