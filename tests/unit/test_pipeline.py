"""The compiled pipeline: up to date, valid against the pipeline spec proto, needs only kfp."""

import json
import os
import subprocess
import sys

import pytest
import yaml

from tfrecord_suite.kfp import compile as compile_module
from tfrecord_suite.kfp.compile import compile_pipeline
from tfrecord_suite.pipelines import PIPELINES, compiled_path

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMPILED_YAML = os.path.join(ROOT, compile_module.COMPILED_YAML)


def _docs(path):
    with open(path) as fh:
        return list(yaml.safe_load_all(fh))


@pytest.mark.parametrize("pipeline", PIPELINES)
def test_committed_yaml_is_up_to_date(tmp_path, pipeline):
    fresh = compile_pipeline(str(tmp_path / "p.yaml"), pipeline=pipeline)
    committed = os.path.join(ROOT, compiled_path(pipeline))
    assert _docs(fresh) == _docs(committed), (
        f"{compiled_path(pipeline)} is stale: run `make compile` and commit it"
    )


def test_the_data_and_training_pipelines():
    """Data only (no training), and training on a published version: the same steps as the
    retraining pipeline, the version pinned by resolve_dataset (never cached: aliases move)."""
    data = _docs(os.path.join(ROOT, compiled_path("data")))[0]
    assert set(data["root"]["dag"]["tasks"]) == {"fingerprint", "shard", "version"}
    assert set(data["root"]["outputDefinitions"]["parameters"]) == {"ref", "digest"}
    training = _docs(os.path.join(ROOT, compiled_path("training")))[0]
    tasks = training["root"]["dag"]["tasks"]
    assert set(tasks) == {"resolve-dataset", "train", "evaluate", "register", "condition-1",
                          "report"}  # fmt: skip
    assert not tasks["resolve-dataset"]["cachingOptions"].get("enableCache")
    ref = tasks["train"]["inputs"]["parameters"]["dataset_ref"]["taskOutputParameter"]
    assert ref == {"producerTask": "resolve-dataset", "outputParameterKey": "ref"}
    assert tasks["resolve-dataset"]["inputs"]["parameters"]["dataset_ref"] == {
        "componentInputParameter": "dataset_ref"
    }
    # every pipeline parameter is described (the Kubeflow UI shows it)
    for spec in (data, training):
        params = spec["root"]["inputDefinitions"]["parameters"]
        assert all(p.get("description") for p in params.values()), params


def test_yaml_parses_as_pipeline_spec_proto():
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2

    docs = _docs(COMPILED_YAML)
    spec = json_format.ParseDict(docs[0], pipeline_spec_pb2.PipelineSpec())
    assert spec.pipeline_info.name == "tfrecord-suite"
    tasks = spec.root.dag.tasks
    assert set(tasks) == {
        "fingerprint",
        "shard",
        "version",
        "train",
        "evaluate",
        "register",
        "condition-1",
        "report",
    }
    assert tasks["version"].dependent_tasks == ["shard"]
    # the gate: promote runs only inside the condition on the evaluation's decision
    gate = tasks["condition-1"]
    assert "promote" in gate.trigger_policy.condition
    assert "evaluate" in gate.trigger_policy.condition
    assert set(spec.components["comp-condition-1"].dag.tasks) == {"promote"}
    # steps that write the registries re-run instead of returning a cached result
    for name in ("version", "register", "fingerprint"):
        assert not tasks[name].caching_options.enable_cache, name
    assert tasks["train"].caching_options.enable_cache
    # training is cached on the exact dataset version and its content digest, not on an artifact
    # that every run mints anew
    train_inputs = tasks["train"].inputs.parameters
    for name, output in (("dataset_ref", "ref"), ("dataset_digest", "digest")):
        src = train_inputs[name].task_output_parameter
        assert (src.producer_task, src.output_parameter_key) == ("version", output)
    assert "dataset" not in tasks["train"].inputs.artifacts
    assert (
        spec.components["comp-train"]
        .output_definitions.artifacts["model"]
        .artifact_type.schema_title
        == "system.Model"
    )
    for doc in docs[1:]:
        json_format.ParseDict(doc, pipeline_spec_pb2.PlatformSpec())
    images = {e["container"]["image"] for e in docs[0]["deploymentSpec"]["executors"].values()}
    assert images == {"ghcr.io/tfrecord-suite/tfrecord-suite:0.1.0"}  # the CPU build everywhere


def test_compiling_imports_no_heavy_library():
    code = (
        "import sys; from tfrecord_suite.kfp.compile import compile_pipeline; "
        "import tempfile, os; compile_pipeline(os.path.join(tempfile.mkdtemp(), 'p.yaml')); "
        "heavy = [m for m in ('tensorflow', 'apache_beam', 'keras') if m in sys.modules]; "
        "print(heavy); sys.exit(bool(heavy))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _executors(docs):
    return docs[0]["deploymentSpec"]["executors"]


def _k8s(docs, executor):
    return docs[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"][executor]


def test_gpu_and_tpu_placement_of_the_train_step(tmp_path):
    import pytest

    from tfrecord_suite.launch.placement import Placement

    gpu = _docs(
        compile_pipeline(
            str(tmp_path / "gpu.yaml"), Placement(accelerator_type="nvidia-l4", accelerator_count=2)
        )
    )
    train = _executors(gpu)["exec-train"]["container"]
    # the train step's own pod runs the CUDA build, and holds all of its GPUs
    assert train["image"] == "ghcr.io/tfrecord-suite/tfrecord-suite-gpu:0.1.0"
    assert train["resources"]["accelerator"]["resourceType"] == "nvidia.com/gpu"
    assert train["resources"]["accelerator"]["resourceCount"] == "2"
    # 2 CPUs and 8 GiB per GPU (launch.placement.PER_GPU_REQUEST), no CPU limit
    assert (
        train["resources"]["cpuRequest"] == 4
        and train["resources"]["memoryRequest"] == 17.179869184
    )
    assert "cpuLimit" not in train["resources"]
    k8s = _k8s(gpu, "exec-train")
    assert k8s["nodeSelector"]["labels"] == {"cloud.google.com/gke-accelerator": "nvidia-l4"}
    assert k8s["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert k8s["emptyDirMounts"][0]["mountPath"] == "/dev/shm"
    shard = _executors(gpu)["exec-shard"]["container"]
    assert "accelerator" not in shard["resources"]
    assert shard["image"] == "ghcr.io/tfrecord-suite/tfrecord-suite:0.1.0"
    # the TFJob replicas get the same image as the in-pod trainer would
    args = gpu[0]["root"]["dag"]["tasks"]["train"]["inputs"]["parameters"]["trainer_image"]
    assert args["runtimeValue"]["constant"] == "ghcr.io/tfrecord-suite/tfrecord-suite-gpu:0.1.0"
    tpu = _docs(
        compile_pipeline(
            str(tmp_path / "tpu.yaml"),
            Placement(
                accelerator_type="tpu-v5-lite-podslice", accelerator_count=4, tpu_topology="2x2"
            ),
        )
    )
    assert _k8s(tpu, "exec-train")["nodeSelector"]["labels"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
        "cloud.google.com/gke-tpu-topology": "2x2",
    }
    train = _executors(tpu)["exec-train"]["container"]
    assert train["resources"]["accelerator"]["resourceType"] == "google.com/tpu"
    assert train["image"] == "ghcr.io/tfrecord-suite/tfrecord-suite-tpu:0.1.0"
    # a TFJob launcher pod waits on CPU; the accelerator image goes to its replicas
    launcher = _docs(
        compile_pipeline(
            str(tmp_path / "tfjob.yaml"),
            Placement(accelerator_type="nvidia-l4", accelerator_count=2, launch_job=True),
        )
    )
    train = _executors(launcher)["exec-train"]["container"]
    assert train["image"] == "ghcr.io/tfrecord-suite/tfrecord-suite:0.1.0"
    assert "accelerator" not in train["resources"] and train["resources"]["cpuRequest"] == 0.5
    args = launcher[0]["root"]["dag"]["tasks"]["train"]["inputs"]["parameters"]
    assert args["trainer_image"]["runtimeValue"]["constant"].endswith("tfrecord-suite-gpu:0.1.0")
    with pytest.raises(ValueError, match="needs --accelerator-type"):
        Placement(accelerator_count=1)


def test_every_step_requests_cpu_and_memory_and_names_its_image(tmp_path):
    from tfrecord_suite.kfp.task_placement import STEP_REQUESTS, Deployment
    from tfrecord_suite.launch.placement import Placement

    docs = _docs(
        compile_pipeline(
            str(tmp_path / "p.yaml"),
            Placement(),
            Deployment(
                image_registry="europe-docker.pkg.dev/acme/ml",
                image_tag="2026.11.1",
                step_resources="shard=16/64Gi,train=8/32Gi",
            ),
        )
    )
    executors = _executors(docs)
    assert len(executors) == 8  # resolve_dataset is the training pipeline's
    for name, executor in executors.items():
        container = executor["container"]
        step = name.removeprefix("exec-").replace("-", "_")
        assert container["image"] == "europe-docker.pkg.dev/acme/ml/tfrecord-suite:2026.11.1"
        assert container["resources"]["cpuRequest"] > 0, name
        assert container["resources"]["memoryRequest"] > 0, name
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["TFRECORD_SUITE_IMAGE"] == container["image"]
        if step in STEP_REQUESTS:
            assert step not in ("shard",) or container["resources"]["cpuRequest"] == 16
    assert executors["exec-shard"]["container"]["resources"]["memoryRequest"] == 68.719476736
    assert executors["exec-train"]["container"]["resources"]["cpuRequest"] == 8


def test_trainer_requests_can_be_set_for_small_nodes(tmp_path):
    """A CPU trainer asks for 3 CPUs and 10 GiB by default: on smaller nodes (the one-node
    cluster's 2 CPUs) the job's nodes stayed Pending with no way to ask for less.
    --cpu-request/--memory-request set what the step's pod and each job node request."""
    from tfrecord_suite.launch.job import JobConfig
    from tfrecord_suite.launch.placement import CPU_TRAINER_REQUEST, Placement
    from tfrecord_suite.launch.trainjob import render_trainjob

    small = Placement(cpu_request="500m", memory_request="3Gi")
    assert Placement.from_json(small.to_json()) == small
    assert small.requests() == {"cpu": "500m", "memory": "3Gi"}
    assert Placement().requests() == dict(zip(("cpu", "memory"), CPU_TRAINER_REQUEST, strict=True))
    gpu = Placement(accelerator_type="nvidia-l4", accelerator_count=1, cpu_request="3")
    assert gpu.requests() == {"cpu": "3", "memory": "8Gi"}
    job = render_trainjob(JobConfig("j", "img", [], workers=2, namespace="ml", placement=small))
    assert job["spec"]["trainer"]["resourcesPerNode"] == {
        "requests": {"cpu": "500m", "memory": "3Gi"}
    }
    docs = _docs(compile_pipeline(str(tmp_path / "p.yaml"), small))
    train = _executors(docs)["exec-train"]["container"]["resources"]
    assert train["cpuRequest"] == 0.5 and train["memoryRequest"] == 3.221225472
    placement = docs[0]["root"]["dag"]["tasks"]["train"]["inputs"]["parameters"]["placement"]
    assert json.loads(placement["runtimeValue"]["constant"])["cpu_request"] == "500m"


def test_bad_deployment_and_placement_fail_with_one_line(tmp_path):
    from click.testing import CliRunner

    from tfrecord_suite.cli.main import main

    cases = [
        (["--image-registry", "Ghcr.io/UPPER/Case"], "is not a valid image registry"),
        (["--image-tag", "-bad"], "is not a valid image tag"),
        (["--step-resources", "shard=lots"], "write step=CPU/MEMORY"),
        (["--step-resources", "sharding=1/1Gi"], "no step 'sharding'"),
        (["--service-cpu-request", "lots"], "--service-cpu-request 'lots': write a quantity"),
        (["--memory-request", "6GB"], "--memory-request '6GB': write a quantity"),
        (
            ["--accelerator-type", "nvidia-l4", "--tpu-topology", "2x2"],
            "is a GPU but --tpu-topology 2x2 asks for a TPU slice",
        ),
    ]
    for flags, message in cases:
        r = CliRunner().invoke(main, ["compile", "--output", str(tmp_path / "x.yaml"), *flags])
        assert r.exit_code == 2, (flags, r.output)
        lines = r.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines
    assert not (tmp_path / "x.yaml").exists()


def test_launcher_is_a_pipeline_parameter_whose_default_compile_sets(tmp_path):
    from click.testing import CliRunner

    from tfrecord_suite.cli.main import main

    def launcher_param(path):
        with open(path) as fh:
            spec = yaml.safe_load_all(fh).__next__()
        param = spec["root"]["inputDefinitions"]["parameters"]["launcher"]
        train = spec["root"]["dag"]["tasks"]["train"]["inputs"]["parameters"]["launcher"]
        assert train == {"componentInputParameter": "launcher"}  # a run can override it
        return param["defaultValue"]

    assert launcher_param(compile_pipeline(str(tmp_path / "a.yaml"))) == "auto"
    out = str(tmp_path / "b.yaml")
    result = CliRunner().invoke(main, ["compile", "--output", out, "--launcher", "tfjob"])
    assert result.exit_code == 0, result.output
    assert launcher_param(out) == "tfjob"
    # --tfjob, the flag's name before TrainJobs, still makes the step a launcher
    out = str(tmp_path / "c.yaml")
    result = CliRunner().invoke(main, ["compile", "--output", out, "--tfjob"])
    assert result.exit_code == 0, result.output
    with open(out) as fh:
        spec = yaml.safe_load_all(fh).__next__()
    placement = spec["root"]["dag"]["tasks"]["train"]["inputs"]["parameters"]["placement"]
    assert json.loads(placement["runtimeValue"]["constant"])["launch_job"] is True
    result = CliRunner().invoke(main, ["compile", "--output", out, "--launcher", "mpijob"])
    assert result.exit_code != 0 and "--launcher 'mpijob'" in result.output


def test_placements_compiled_before_the_rename_still_load():
    from tfrecord_suite.launch.placement import Placement

    old = '{"accelerator_count": 0, "accelerator_type": "", "tfjob": true}'
    assert Placement.from_json(old).launch_job is True


def test_no_caching_turns_every_step_off(tmp_path):
    from tfrecord_suite.kfp.task_placement import Deployment

    def cached(path):
        tasks = _docs(path)[0]["root"]["dag"]["tasks"]
        return {name for name, t in tasks.items() if t.get("cachingOptions", {}).get("enableCache")}

    assert cached(COMPILED_YAML) == {"shard", "train", "evaluate", "report"}
    path = compile_pipeline(str(tmp_path / "p.yaml"), deployment=Deployment(caching=False))
    assert cached(path) == set()


def test_a_one_gpu_trainer_fits_the_smallest_common_one_gpu_machines():
    """launch.placement.PER_GPU_REQUEST fits what GKE's g2-standard-4 and n1-standard-4 with a
    T4 leave to pods (about 3.9 CPUs and 12 GiB after the kubelet's reservations and daemon
    sets), the machines its comment names."""
    from tfrecord_suite.launch.placement import PER_GPU_REQUEST

    cpus, gib = PER_GPU_REQUEST
    assert cpus <= 3.9 and gib <= 12
