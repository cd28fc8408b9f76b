"""The suite's pipelines on Kubeflow Pipelines 2.17.0's real backend (the one-node cluster's:
tests/cluster/kubeflow_pipelines.py), submitted as a user submits them: ``tfrecord-suite submit``
with the profile's namespace and a token of its account, images under the cluster's own
registry and tag, small real data in the profile's part of the cluster's object store.

Each run's result is read back as the UI shows it: its state and tasks through the KFP API, its
executions and artifacts from ML Metadata through the UI's gRPC-web endpoint
(realparts.mlmd.run_lineage). Markers ``cluster`` and ``kfp``: ``make test-cluster`` runs them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.kfp, pytest.mark.slow, pytest.mark.timeout(3600)]

#: The header Kubeflow's authenticating proxy adds to the UI's requests for the profile's owner
OWNER = {"kubeflow-userid": "user@example.com"}


def submit(profile: Any, pipeline: str, *args: str, wait: bool = True) -> dict[str, Any]:
    """``tfrecord-suite submit`` as a user runs it; its JSON summary."""
    argv = [sys.executable, "-m", "tfrecord_suite.cli", "submit", *profile.submit_args(pipeline),
            *args, "--json"]  # fmt: skip
    if wait:
        argv += ["--wait", "--timeout", "2400"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=2700)
    assert proc.returncode == 0, f"submit failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout[proc.stdout.index("{") :])


def client(profile: Any) -> Any:
    """A ``kfp.Client`` of the profile's account (what the UI's API calls see)."""
    from tfrecord_suite.kfp.endpoint import KfpEndpoint

    return KfpEndpoint(profile.host, profile.namespace, token_file=profile.token_file).client(
        profile.namespace
    )


def lineage(profile: Any, run_id: str) -> dict[str, dict[str, Any]]:
    """``task display name -> execution`` of a run, from ML Metadata as the UI reads it."""
    from realparts import mlmd

    executions = mlmd.run_lineage(profile.ui, run_id, OWNER)["executions"]
    return {e["name"]: e for e in executions if e["name"]}


def run_pods(profile: Any, run_id: str) -> list[Any]:
    """Every pod a run made in the profile (KFP labels each with the run's id)."""
    from kubernetes import client as k8s

    core = k8s.CoreV1Api(profile.cluster.api_client())
    return core.list_namespaced_pod(
        profile.namespace, label_selector=f"pipeline/runid={run_id}"
    ).items


def assert_images_compiled(profile: Any, pods: list[Any]) -> None:
    """Each container of these pods runs an image the cluster's registry names or one of KFP's
    own (driver, launcher, Argo's executor): none names the suite's default registry, which the
    node does not hold."""
    from tfrecord_suite.images import DEFAULT_REGISTRY

    assert pods
    seen = set()
    for pod in pods:
        for container in [*pod.spec.containers, *(pod.spec.init_containers or [])]:
            seen.add(container.image)
            assert not container.image.startswith(DEFAULT_REGISTRY), (pod.metadata.name, seen)
    assert f"{profile.images.registry}/tfrecord-suite:{profile.images.tag}" in seen, seen


@pytest.fixture(scope="module")
def penguins(kfp_profile) -> dict[str, str]:
    """The penguins table in the profile's part of the object store; the pipelines' inputs."""
    root = kfp_profile.root
    bucket, _, prefix = root.removeprefix("s3://").partition("/")
    with tempfile.TemporaryDirectory() as tmp:
        from tfrecord_suite import demo_data

        path = demo_data.write_penguins(os.path.join(tmp, "penguins.csv"))
        kfp_profile.s3().upload_file(path, bucket, f"{prefix}/raw/penguins.csv")
    return {
        "input_uri": f"{root}/raw/penguins.csv",
        "registry_root": f"{root}/registry-{time.strftime('%H%M%S')}",
        "dataset_name": "penguins",
    }


def params(values: dict[str, Any]) -> list[str]:
    """``--param k=v`` for each."""
    return [arg for key, value in values.items() for arg in ("--param", f"{key}={value}")]


def test_data_pipeline_runs_and_an_identical_submission_is_cached(kfp_profile, penguins):
    """The data pipeline (fingerprint, shard, version) succeeds; the staged and published
    datasets' metadata read back as the UI shows it; every pod ran the compiled images.
    Submitted again unchanged, the shard step comes back cached (its cache key is the
    fingerprint of the same input), while the fingerprint and the publish run again, as
    kfp/steps.py says they must."""
    first = submit(kfp_profile, "data", *params(penguins))
    assert first["state"] == "SUCCEEDED", first
    assert first["backend"] == "2.17.0" and first["namespace"] == kfp_profile.namespace
    tasks = lineage(kfp_profile, first["run_id"])
    staged = tasks["Shard to TFRecords (Beam)"]["outputs"]["staged"]
    assert staged["type"] == "system.Dataset"
    assert staged["properties"]["records"] == 344.0 and staged["properties"]["bad_rows"] == 0.0
    dataset = tasks["Publish dataset version"]["outputs"]["dataset"]["properties"]
    assert dataset["version"] == "1.0.0" and dataset["name"] == "penguins"
    assert_images_compiled(kfp_profile, run_pods(kfp_profile, first["run_id"]))

    second = submit(kfp_profile, "data", *params(penguins))
    assert second["state"] == "SUCCEEDED", second
    assert second["version_id"] == first["version_id"]  # the same compiled version, reused
    again = lineage(kfp_profile, second["run_id"])
    assert again["Shard to TFRecords (Beam)"]["state"] == "CACHED"
    assert again["Fingerprint input"]["state"] == "COMPLETE"
    assert again["Publish dataset version"]["state"] == "COMPLETE"
    # the cached step's outputs are the first run's
    assert again["Shard to TFRecords (Beam)"]["outputs"]["staged"]["uri"] == staged["uri"]
    # the API shows the skipped executor as KFP 2.17 does (its API has no CACHED state)
    run = client(kfp_profile).get_run(second["run_id"])
    states = {t.display_name: t.state for t in run.run_details.task_details}
    assert states["shard"] == "SUCCEEDED", states
