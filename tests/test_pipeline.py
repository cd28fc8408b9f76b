"""The compiled pipeline: up to date, valid against the pipeline spec proto, needs only kfp."""

import subprocess
import sys

import yaml

from tfrecord_suite.pipelines.compile import COMPILED_YAML, compile_pipeline


def _docs(path):
    with open(path) as fh:
        return list(yaml.safe_load_all(fh))


def test_committed_yaml_is_up_to_date(tmp_path):
    fresh = compile_pipeline(str(tmp_path / "p.yaml"))
    assert _docs(fresh) == _docs(COMPILED_YAML), (
        "pipelines/tfrecord_suite_pipeline.yaml is stale: run `make compile` and commit it"
    )


def test_yaml_parses_as_pipeline_spec_proto():
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2

    docs = _docs(COMPILED_YAML)
    spec = json_format.ParseDict(docs[0], pipeline_spec_pb2.PipelineSpec())
    assert spec.pipeline_info.name == "tfrecord-suite"
    tasks = spec.root.dag.tasks
    assert set(tasks) == {
        "fingerprint-op",
        "shard-op",
        "version-op",
        "train-op",
        "evaluate-op",
        "register-op",
        "condition-1",
        "report-op",
    }
    assert tasks["version-op"].dependent_tasks == ["shard-op"]
    # the gate: promote runs only inside the condition on the evaluation's decision
    gate = tasks["condition-1"]
    assert "promote" in gate.trigger_policy.condition
    assert "evaluate-op" in gate.trigger_policy.condition
    assert set(spec.components["comp-condition-1"].dag.tasks) == {"promote-op"}
    # steps that write the registries re-run instead of returning a cached result
    for name in ("version-op", "register-op", "fingerprint-op"):
        assert not tasks[name].caching_options.enable_cache, name
    assert tasks["train-op"].caching_options.enable_cache
    # training is cached on the exact dataset version and its content digest, not on an artifact
    # that every run mints anew
    train_inputs = tasks["train-op"].inputs.parameters
    for name, output in (("dataset_ref", "ref"), ("dataset_digest", "digest")):
        src = train_inputs[name].task_output_parameter
        assert (src.producer_task, src.output_parameter_key) == ("version-op", output)
    assert "dataset" not in tasks["train-op"].inputs.artifacts
    assert (
        spec.components["comp-train-op"]
        .output_definitions.artifacts["model"]
        .artifact_type.schema_title
        == "system.Model"
    )
    for doc in docs[1:]:
        json_format.ParseDict(doc, pipeline_spec_pb2.PlatformSpec())
    images = {e["container"]["image"] for e in docs[0]["deploymentSpec"]["executors"].values()}
    assert len(images) == 1 and next(iter(images)).startswith("ghcr.io/tfrecord-suite/")


def test_compiling_imports_no_heavy_library():
    code = (
        "import sys; from tfrecord_suite.pipelines.compile import compile_pipeline; "
        "import tempfile, os; compile_pipeline(os.path.join(tempfile.mkdtemp(), 'p.yaml')); "
        "heavy = [m for m in ('tensorflow', 'apache_beam', 'keras') if m in sys.modules]; "
        "print(heavy); sys.exit(bool(heavy))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_gpu_and_tpu_placement_of_the_train_step(tmp_path):
    import pytest

    from tfrecord_suite.pipelines.placement import Placement

    gpu = _docs(
        compile_pipeline(
            str(tmp_path / "gpu.yaml"), Placement(accelerator_type="nvidia-l4", accelerator_count=2)
        )
    )
    train = gpu[0]["deploymentSpec"]["executors"]["exec-train-op"]["container"]["resources"]
    assert train["accelerator"]["resourceType"] == "nvidia.com/gpu"
    assert train["accelerator"]["resourceCount"] == "2"
    k8s = gpu[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]["exec-train-op"]
    assert k8s["nodeSelector"]["labels"] == {"cloud.google.com/gke-accelerator": "nvidia-l4"}
    assert k8s["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert k8s["emptyDirMounts"][0]["mountPath"] == "/dev/shm"
    assert "resources" not in gpu[0]["deploymentSpec"]["executors"]["exec-shard-op"]["container"]
    tpu = _docs(
        compile_pipeline(
            str(tmp_path / "tpu.yaml"),
            Placement(
                accelerator_type="tpu-v5-lite-podslice", accelerator_count=4, tpu_topology="2x2"
            ),
        )
    )
    k8s = tpu[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]["exec-train-op"]
    assert k8s["nodeSelector"]["labels"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
        "cloud.google.com/gke-tpu-topology": "2x2",
    }
    res = tpu[0]["deploymentSpec"]["executors"]["exec-train-op"]["container"]["resources"]
    assert res["accelerator"]["resourceType"] == "google.com/tpu"
    with pytest.raises(ValueError, match="needs --accelerator-type"):
        Placement(accelerator_count=1)
