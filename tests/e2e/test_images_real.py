"""The suite's images built for real and every pipeline step run inside them (marker
``containers``).

`tfrecord-suite images build` builds the committed Dockerfiles unchanged through the Docker SDK
against podman's Docker API, on locally made stand-ins of the bases they pin (no registry is
reachable here). The whole DAG then runs through kfp.local's DockerRunner: each step in the
component image as UID 10001, with the command the compiler writes (kfp.dsl.executor_main), the
way a Kubeflow backend runs it.

What the stand-ins cannot prove is written in the README (Kubeflow > What was proven here).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from fakes.podman_harness import (
    check_podman,
    ensure_beam_sdk_base,
    ensure_python_base,
    kfp_docker_runner_on_podman,
    podman,
    podman_service,
    prune_dangling_images,
)
from tfrecord_suite import images
from tfrecord_suite.io import storage

pytestmark = [pytest.mark.containers, pytest.mark.timeout(3600)]
IMAGES = images.DEFAULT_IMAGES


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    check_podman()
    prune_dangling_images()
    ensure_python_base()
    with podman_service(str(tmp_path_factory.mktemp("podman"))) as url:
        yield url
    prune_dangling_images()


def _build(engine: str, key: str) -> str:
    """`tfrecord-suite images build --only KEY` against the engine; returns the image."""
    proc = subprocess.run(
        [sys.executable, "-m", "tfrecord_suite.cli", "images", "build", "--only", key,
         "--docker-host", engine, "--json"],
        capture_output=True, text=True, timeout=3000,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    (built,) = json.loads(proc.stdout)
    assert built["key"] == key and built["image"] == IMAGES.image(key)
    return built["image"]


def _run(image: str, *command: str, user: str | None = None) -> str:
    args = ["run", "--rm", "--network", "none"]
    if user is not None:
        args += ["--user", user]
    proc = podman(*args, image, *command, check=False, timeout=600)
    assert proc.returncode == 0, f"{command} in {image}: {proc.stderr[-3000:]}"
    return proc.stdout


@pytest.fixture(scope="module")
def component_image(engine):
    return _build(engine, "component")


def test_component_image_runs_as_10001_and_the_launcher_can_write(component_image):
    out = _run(
        component_image,
        "sh",
        "-ec",
        "id -u; mkdir -p /minio/mlpipeline/run/x /s3/b/y /gcs/b/z; python3 -c '"
        "import os, tensorflow, apache_beam, kfp, tfrecord_suite.steps.training; "
        'print(os.environ["LD_PRELOAD"], tensorflow.__version__, apache_beam.__version__, '
        "kfp.__version__)'",
    )
    uid, versions = out.split()[0], out.split()[1:]
    assert uid == "10001"
    assert versions == [
        "/usr/local/lib/libtcmalloc_minimal.so.4", "2.21.0", "2.77.0", "2.17.0",
    ]  # fmt: skip
    # no entrypoint: the command a Kubernetes pod or `docker run IMAGE CMD` gives runs as is
    assert "Usage: tfrecord-suite" in _run(component_image)


def test_the_shard_steps_compiled_loops_come_compiled_in_the_component_image(component_image):
    """The image's build compiled them: the step's user loads each, compiling none again."""
    out = _run(
        component_image,
        "sh",
        "-ec",
        "NUMBA_DEBUG_CACHE=1 python3 -m tfrecord_suite.shard.warm 2>&1",
    )
    loaded = [line for line in out.splitlines() if "data loaded from" in line]
    assert loaded and "data saved" not in out and "index saved" not in out, out[-3000:]
    assert all("/opt/tfrecord-suite/numba-cache/" in line for line in loaded)


def test_whole_dag_runs_inside_the_component_image(engine, component_image, tmp_path, monkeypatch):
    from support import write_csv

    from tfrecord_suite.kfp.local_run import run_local
    from tfrecord_suite.registry.datasets import Registry
    from tfrecord_suite.registry.models import ModelRegistry

    workdir = tmp_path / "bucket"
    (workdir / "raw").mkdir(parents=True)
    raw = write_csv(
        str(workdir / "raw" / "blobs.csv"),
        ["x", "y", "kind"],
        [[i % 7 + (i % 3) * 10, (i * 5) % 11, "abc"[i % 3]] for i in range(300)],
    )
    monkeypatch.setenv("DOCKER_HOST", engine)
    lines: list[str] = []
    with kfp_docker_runner_on_podman():
        summary = run_local(
            input_uri=raw,
            workdir=str(workdir),
            dataset_name="blobs",
            runner="docker",
            say=lines.append,
            label="kind",
            epochs=4,
            batch_size=16,
            learning_rate=0.02,
        )
    # one line per step as it starts and ends, epochs while training; the rest in the log
    steps = [s["step"] for s in summary["steps"]]
    assert sorted(steps) == sorted(
        ["fingerprint", "shard", "version", "train", "evaluate", "register",
         "promote", "report"]
    ), steps  # fmt: skip
    assert all(s["status"] == "success" for s in summary["steps"]), summary["steps"]
    assert any("train: epoch 4/4" in line for line in lines), lines
    assert len(lines) < 60, lines
    log = open(summary["log"]).read()
    assert f"Found image '{component_image}'" in log
    # every step ran inside the image as UID 10001: what they wrote on the shared folder is
    # owned by that user, and the manifests name the image from the compiled environment
    registry = Registry(str(workdir / "registry"))
    version = registry.latest("blobs")
    manifest_uri = registry.manifest_uri("blobs", version)
    assert os.stat(manifest_uri).st_uid == 10001
    assert registry.manifest("blobs", version).producer["image"] == component_image
    models = ModelRegistry(str(workdir / "registry" / "_models"))
    model = models.get("blobs", 1)
    assert os.stat(os.path.join(model.export_dir, "saved_model.pb")).st_uid == 10001
    assert model.manifest["lineage"]["image"] == component_image
    assert (summary["registered_model"], summary["gate"]) == (1, "promote")
    assert summary["metrics"]["test_accuracy"] > 0.6, summary["metrics"]
    # the exported model is kept at the model artifact's path, which Kubeflow uploads
    assert os.path.isfile(os.path.join(summary["export_dir"], "saved_model.pb"))
    assert storage.exists(os.path.join(summary["dataset_uri"], "manifest.json"))
    # every artifact's metadata, as each step wrote it inside the image, passes the launcher's
    # conversion into ML Metadata (no null: a first version has no parent, a first evaluation
    # no baseline)
    from fakes.launcher import mlmd_rejections, output_artifacts

    assert len(output_artifacts(str(workdir))) >= 12
    assert mlmd_rejections(str(workdir)) == []


def test_gpu_image_builds_and_trains(engine, tmp_path, published_digits):
    """The GPU trainer image: TensorFlow built with CUDA, and the trainer runs in it (on the CPU
    here: there is no GPU on this machine)."""
    image = _build(engine, "trainer-gpu")
    out = _run(
        image,
        "python3",
        "-c",
        "import os, tensorflow as tf, pydantic, tfrecord_suite.train.trainer; "
        "print(os.getuid(), tf.__version__, tf.test.is_built_with_cuda())",
    )
    assert out.split() == ["10001", "2.21.0", "True"]
    registry = published_digits["registry"].root
    os.chmod(tmp_path, 0o777)
    proc = podman(
        "run", "--rm", "--network", "none",
        "-v", f"{registry}:{registry}:ro", "-v", f"{tmp_path}:{tmp_path}",
        image, "tfrecord-suite", "train", "--dataset", published_digits["ref"],
        "--model-dir", str(tmp_path / "model"), "--epochs", "1", "--batch-size", "64",
        "--json", check=False, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert os.path.isfile(tmp_path / "model" / "export" / "saved_model.pb")


def test_dataflow_worker_image_keeps_the_sdk_entrypoint(engine):
    """Dataflow's rules for custom containers: Beam's boot entrypoint, root, the launcher's Beam
    version, the suite's transforms importable. The stand-in base cannot prove the real boot."""
    import apache_beam
    import docker

    ensure_beam_sdk_base()
    image = _build(engine, "beam-worker")
    attrs = docker.DockerClient(base_url=engine).images.get(image).attrs["Config"]
    assert attrs["Entrypoint"] == ["/opt/apache/beam/boot"]
    assert attrs.get("User", "") in ("", "root", "0")
    out = podman(
        "run", "--rm", "--network", "none", "--entrypoint", "python3", image, "-c",
        "import apache_beam, tfrecord_suite.shard.transforms; print(apache_beam.__version__)",
        timeout=600,
    ).stdout  # fmt: skip
    assert out.strip() == apache_beam.__version__ == "2.77.0"


@pytest.mark.parametrize("overlay", ["multi-user", "standalone"])
def test_cronjob_pod_retrains_in_podman(component_image, tmp_path, gcs_bucket, overlay):
    """The retraining CronJob's pod, as each overlay of k8s/ renders it, run by `podman kube
    play` with its exact command, args, security context (UID 10001, no capabilities, no
    privilege escalation, seccomp) and read-only root, against the KFP API stand-in: it
    fingerprints the raw data on GCS, compiles the pipeline and submits a run; in a profile
    (multi-user) with its projected token and in its namespace, standalone with neither.

    What podman cannot play is replaced by what the cluster would give, each named here: the
    pod joins the host's network (the stand-ins listen on 127.0.0.1), the settings ConfigMap
    (k8s/base/retrain.yaml) is a host folder whose data and API addresses point at the
    stand-ins (plus STORAGE_EMULATOR_HOST for the GCS one), the namespace from the
    downward API is written in (podman 4.3 resolves no fieldRef to metadata.namespace), the
    `$(VAR)` references in args are expanded as the kubelet expands them (podman 4.3 passes them
    on as written), and the projected token is a file in a host folder (podman has no
    service-account tokens)."""
    import copy
    import uuid

    import yaml

    from fakes import manifests
    from fakes.fakekfp import FakeKfp

    job = manifests.cronjob(overlay)
    multi_user = overlay == "multi-user"
    namespace = job["metadata"]["namespace"] if multi_user else ""
    template = job["spec"]["jobTemplate"]["spec"]["template"]
    spec = copy.deepcopy(template["spec"])
    (container,) = spec["containers"]
    assert container["image"] == component_image  # the images component's rewrite
    storage.write_text(f"{gcs_bucket}/raw/rows.csv", "x,label\n1,a\n2,b\n3,a\n")
    token_dir = tmp_path / "token"
    token_dir.mkdir()
    (token_dir / "token").write_text("projected-token")
    tokens = ("projected-token",) if multi_user else ()
    with FakeKfp(multi_user=multi_user, tokens=tokens) as api:
        # the settings ConfigMap (k8s/base/retrain.yaml), with the bucket and the API here
        settings = {
            **manifests.retrain_settings(),
            "input": f"{gcs_bucket}/raw/rows.csv",
            "registry": f"{gcs_bucket}/registry",
            "dataset": "rows",
            "host": api.url,
        }
        settings["params"] = {**settings["params"], "label": "label"}  # fmt: skip
        settings_dir = tmp_path / "settings"
        settings_dir.mkdir()
        (settings_dir / "retrain.yaml").write_text(yaml.safe_dump(settings))
        stand_ins = {"KFP_NAMESPACE": namespace}  # the downward API's metadata.namespace
        container["env"] = [
            {"name": e["name"], "value": stand_ins[e["name"]]} if e["name"] in stand_ins else e
            for e in container["env"]
        ] + [{"name": "STORAGE_EMULATOR_HOST", "value": os.environ["STORAGE_EMULATOR_HOST"]}]
        values = {e["name"]: e["value"] for e in container["env"]}
        container["args"] = [manifests.expand(a, values) for a in container["args"]]
        spec["hostNetwork"] = True
        host_paths = {"projected": token_dir, "configMap": settings_dir}
        spec["volumes"] = [
            next(
                ({"name": v["name"], "hostPath": {"path": str(p), "type": "Directory"}}
                 for key, p in host_paths.items() if key in v),
                v,
            )
            for v in spec["volumes"]
        ]  # fmt: skip
        name = f"tfrs-retrain-{uuid.uuid4().hex[:8]}"
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, **copy.deepcopy(template["metadata"])},
            "spec": spec,
        }
        path = tmp_path / "pod.yaml"
        path.write_text(yaml.safe_dump(pod))
        podman("kube", "play", str(path), timeout=300)
        try:
            ctr = f"{name}-{container['name']}"
            for _ in range(600):
                state = podman("inspect", ctr, "--format", "{{.State.Status}}").stdout.strip()
                if state in ("exited", "stopped"):
                    break
                time.sleep(0.5)
            info = json.loads(podman("inspect", ctr).stdout)[0]
            out = podman("logs", ctr)
            logs = out.stdout + out.stderr
        finally:
            podman("pod", "rm", "--force", name, check=False)
        assert info["State"]["ExitCode"] == 0, logs[-3000:]
        # the pod ran as the manifest says, not as podman's defaults
        assert info["HostConfig"]["ReadonlyRootfs"] is True
        assert info["Config"]["User"].split(":")[0] == "10001"
        assert "no-new-privileges" in info["HostConfig"]["SecurityOpt"]
        assert "CAP_CHOWN" in info["HostConfig"]["CapDrop"]
        assert info["Config"]["Cmd"][:2] == ["tfrecord-suite", "retrain"] or info["Path"] == (
            "tfrecord-suite"
        )
        lines = logs.splitlines()
        start, end = lines.index("{"), lines.index("}")  # --json: the summary on stdout
        result = json.loads("\n".join(lines[start : end + 1]))
        assert result["submitted"] is True and result["namespace"] == namespace, result
        assert api.errors == []
        assert api.tokens_seen() == ({"Bearer projected-token"} if multi_user else {None})
        (run,) = api.runs.values()
        assert run["runtime_config"]["parameters"]["input_uri"] == f"{gcs_bucket}/raw/rows.csv"
        assert next(iter(api.experiments.values())).get("namespace", "") == namespace


def test_users_own_pipeline_runs_inside_the_image(engine, component_image, tmp_path, monkeypatch):
    """tests/e2e/user_pipeline.py (components loaded from components/*/*/component.yaml, and the
    user's own component reading our Dataset and Model) through kfp.local's DockerRunner:
    every step in the built image, as a Kubeflow backend runs it."""
    from kfp import local
    from test_user_pipeline import HERE, blobs, check_run

    sys.path.insert(0, HERE)
    try:
        import user_pipeline
    finally:
        sys.path.remove(HERE)
    workdir = tmp_path / "bucket"
    (workdir / "raw").mkdir(parents=True)
    os.chmod(workdir, 0o777)  # the steps run as the image's UID 10001
    raw = blobs(workdir)
    monkeypatch.setenv("DOCKER_HOST", engine)
    with kfp_docker_runner_on_podman():
        local.init(runner=local.DockerRunner(), pipeline_root=str(workdir), raise_on_error=True)
        task = user_pipeline.user_pipeline(input_uri=raw, registry_root=str(workdir / "registry"))
    check_run(json.loads(task.output), str(workdir / "registry"))
    assert os.stat(workdir / "registry" / "blobs" / "1.0.0" / "manifest.json").st_uid == 10001


def test_data_service_pods_serve_the_reader_in_podman(component_image, tmp_path, kubectl):
    """k8s/data-service's dispatcher and two worker containers, as kustomize renders them, run
    in the component image with their exact commands and args, and a trainer-side container
    reads a version through them: every training record exactly once, from the workers.

    What podman cannot give is replaced by what the cluster would, each named here: podman
    cannot run a StatefulSet, so each of its pods is a `podman run` container (as UID 10001) on a
    network of its own with a fixed IP; the headless Service's names (`<pod>.tfrs-data`) are
    /etc/hosts entries for those IPs in every container; `$(POD_NAME)` is expanded as the
    kubelet expands it; the journal's volume claim and the /tmp emptyDir are tmpfs; the
    securityContext is podman's --read-only, --cap-drop and no-new-privileges; the version is a host folder
    mounted at the same path in the workers and the reader (on a cluster: the bucket)."""
    import random
    import uuid

    from support import write_csv

    from fakes import manifests
    from tfrecord_suite.registry.datasets import Registry
    from tfrecord_suite.shard.step import ShardConfig, run_shard
    from tfrecord_suite.train.reader import dataset_for_split
    from tfrecord_suite.train.reader_config import ReaderConfig

    data = tmp_path / "data"
    csv = write_csv(str(tmp_path / "rows.csv"), ["id", "label"],
                    [[i, "ab"[i % 2]] for i in range(6_000)])  # fmt: skip
    run_shard(ShardConfig(input=csv, output=str(data / "staged"), label="label", num_shards=4))
    registry = Registry(str(data / "registry"))
    ref = f"{registry.root}/rows@{registry.publish(str(data / 'staged'), 'rows').version}"
    one_pass = ReaderConfig(batch_size=128, repeat=False)
    expected = sorted(
        i for f, _ in dataset_for_split(ref, "train", one_pass) for i in f["id"].numpy().ravel()
    )
    subprocess.run(["chmod", "-R", "a+rX", str(data)], check=True)

    docs = {d["metadata"]["name"]: d for d in manifests.render("data-service")
            if d["kind"] in ("Service", "StatefulSet")}  # fmt: skip
    service = docs["tfrs-data"]["metadata"]["name"]
    subnet = f"10.{random.randint(90, 250)}.{random.randint(0, 250)}"
    pods = {"tfrs-data-dispatcher-0": ("tfrs-data-dispatcher", f"{subnet}.10")}
    for i in range(docs["tfrs-data-worker"]["spec"]["replicas"]):
        pods[f"tfrs-data-worker-{i}"] = ("tfrs-data-worker", f"{subnet}.{11 + i}")
    hosts = [f"--add-host={pod}.{service}:{ip}" for pod, (_, ip) in pods.items()]
    network = f"tfrs-ds-{uuid.uuid4().hex[:8]}"
    podman("network", "create", "--subnet", f"{subnet}.0/24", network)
    common = ["--network", network, *hosts, "-v", f"{data}:{data}:ro"]
    names = {pod: f"{network}-{pod}" for pod in pods}
    probes = []
    try:
        for pod, (sts, ip) in pods.items():
            (container,) = docs[sts]["spec"]["template"]["spec"]["containers"]
            assert container["image"] == component_image
            env = {"POD_NAME": pod, "HOME": "/tmp"}
            args = [manifests.expand(a, env) for a in container["args"]]
            mounts = [
                f"--tmpfs={m['mountPath']}:mode=1777" for m in container.get("volumeMounts", [])
            ]
            # the container's securityContext, as the runtime applies it: a read-only root
            # (writable only where a volume is mounted), no capabilities, no privilege gain
            security = container["securityContext"]
            assert security["readOnlyRootFilesystem"] and not security["allowPrivilegeEscalation"]
            assert security["capabilities"]["drop"] == ["ALL"]
            locked = ["--read-only", "--cap-drop=ALL", "--security-opt=no-new-privileges"]
            podman("run", "-d", "--name", names[pod], "--ip", ip, "--user", "10001:10001",
                   *common, *mounts, *locked, "-e", "HOME=/tmp", component_image,
                   *container["command"], *args)  # fmt: skip
            probes.append((pod, container["readinessProbe"]["exec"]["command"]))
        # what the kubelet's readiness probes gate (a worker is ready once registered): a
        # one-pass read started before could end without a late worker's share
        for pod, probe in probes:
            for _ in range(600):
                if podman("exec", names[pod], *probe, check=False).returncode == 0:
                    break
                time.sleep(0.5)
            else:
                pytest.fail(f"{pod} never got ready: {podman('logs', names[pod]).stderr[-2000:]}")
        reader = (
            "import json, sys\n"
            "from tfrecord_suite.train.reader import dataset_for_split\n"
            "from tfrecord_suite.train.reader_config import ReaderConfig\n"
            f"ds = dataset_for_split({ref!r}, 'train', ReaderConfig(batch_size=128, repeat=False),"
            " service=sys.argv[1])\n"
            "print(json.dumps(sorted(int(i) for f, _ in ds for i in f['id'].numpy().ravel())))\n"
        )
        dispatcher = f"grpc://tfrs-data-dispatcher-0.{service}:5050"
        proc = podman("run", "--rm", "--ip", f"{subnet}.20", "--user", "10001:10001", *common,
                      "-e", "HOME=/tmp", component_image, "python", "-c", reader, dispatcher,
                      check=False, timeout=600)  # fmt: skip
        logs = {
            pod: podman("logs", name, check=False).stderr[-1500:] for pod, name in names.items()
        }
        assert proc.returncode == 0, (proc.stderr[-3000:], logs)
        assert json.loads(proc.stdout.strip().splitlines()[-1]) == expected
        for name in names.values():
            podman("stop", "--time", "20", name)  # SIGTERM: each leaves with 0, no crash
            assert podman("inspect", name, "--format", "{{.State.ExitCode}}").stdout.strip() == "0"
    finally:
        for name in names.values():
            podman("rm", "--force", name, check=False)
        podman("network", "rm", "--force", network, check=False)
