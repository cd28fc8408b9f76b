"""Change-triggered retraining: the input fingerprint, and submitting only on new data (the
manifests that run it are tested in test_k8s_manifests.py)."""

import json
import os
import shutil
import sys
import time

import pytest


@pytest.mark.gcs
def test_gcs_fingerprint_follows_content_not_generation(gcs_bucket):
    from tfrecord_suite.io import storage
    from tfrecord_suite.shard import sources
    from tfrecord_suite.shard.step import input_fingerprint

    uri = f"{gcs_bucket}/raw/rows.csv"
    storage.write_text(uri, "x,label\n1,a\n")
    first_info = storage.stat(uri)
    first = input_fingerprint(sources.resolve_inputs(f"{gcs_bucket}/raw"))
    storage.write_text(uri, "x,label\n1,a\n")  # uploaded again: a new generation
    assert storage.stat(uri).generation != first_info.generation
    assert first_info.checksum.startswith("md5:")
    again = input_fingerprint(sources.resolve_inputs(f"{gcs_bucket}/raw"))
    assert again["digest"] == first["digest"]
    storage.write_text(uri, "x,label\n1,b\n")
    assert input_fingerprint(sources.resolve_inputs(uri))["digest"] != first["digest"]


def test_retrain_submits_only_when_the_input_changed(tmp_path):
    from test_registry import make_staged

    from tfrecord_suite.registry.datasets import Registry
    from tfrecord_suite.retrain import retrain
    from tfrecord_suite.shard import sources
    from tfrecord_suite.shard.step import input_fingerprint

    raw = tmp_path / "raw.csv"
    raw.write_text("x,label\n1,a\n2,b\n")
    reg = Registry(str(tmp_path / "reg"))
    calls = []

    def submit(params):
        calls.append(params)
        return {"run_id": f"run-{len(calls)}"}

    first = retrain(
        input_uri=str(raw),
        registry_root=reg.root,
        dataset="rows",
        if_changed=True,
        params={"epochs": 3},
        submit=submit,
    )
    assert first["submitted"] and "no version" in first["reason"]
    assert calls[0] == {
        "epochs": 3,
        "input_uri": str(raw),
        "registry_root": reg.root,
        "dataset_name": "rows",
    }
    staged = make_staged(str(tmp_path / "staged"))
    summary_path = os.path.join(staged, "summary.json")
    import json

    summary = json.load(open(summary_path))
    summary["input_fingerprint"] = input_fingerprint(sources.resolve_inputs(str(raw)))
    open(summary_path, "w").write(json.dumps(summary))
    reg.publish(staged, "rows")
    second = retrain(
        input_uri=str(raw),
        registry_root=reg.root,
        dataset="rows",
        if_changed=True,
        params={},
        submit=submit,
    )
    assert not second["submitted"] and "unchanged" in second["reason"] and len(calls) == 1
    # the same bytes written again (a new mtime, as a re-upload makes a new generation) are no
    # change: the fingerprint is over contents
    time.sleep(0.01)
    raw.write_text("x,label\n1,a\n2,b\n")
    again = retrain(
        input_uri=str(raw), registry_root=reg.root, dataset="rows", if_changed=True, params={},
        submit=submit,
    )  # fmt: skip
    assert not again["submitted"] and len(calls) == 1, again
    raw.write_text("x,label\n1,a\n2,b\n3,c\n")
    third = retrain(
        input_uri=str(raw),
        registry_root=reg.root,
        dataset="rows",
        if_changed=True,
        params={},
        submit=submit,
    )
    assert third["submitted"] and "differs" in third["reason"] and len(calls) == 2
    forced = retrain(
        input_uri=str(raw),
        registry_root=reg.root,
        dataset="rows",
        if_changed=False,
        params={},
        submit=submit,
    )
    assert forced["submitted"]


# ----------------------------------------------- what the CronJob and CI compile and upload

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


#: A digest k8s/images may pin the component image by (kustomize renders NAME:TAG@DIGEST).
DIGEST = "sha256:" + "0123456789abcdef" * 4


def _edited_k8s(tmp_path, bucket, digest=""):
    """A copy of k8s/ with every value a user sets for retraining changed in its one place:
    the registry and tag (and the component image's ``digest``, if given) in k8s/images, the
    rest in k8s/base/retrain.yaml."""
    import yaml

    copy = tmp_path / "repo" / "k8s"
    shutil.copytree(os.path.join(ROOT, "k8s"), copy)
    component = copy / "images" / "kustomization.yaml"
    images = yaml.safe_load(component.read_text())
    for image in images["images"]:
        image["newName"] = image["name"].replace("ghcr.io/tfrecord-suite", "eu.gcr.io/acme/ml")
        image["newTag"] = "2026.11"
        if digest and image["name"].endswith("/tfrecord-suite"):
            image["digest"] = digest
    component.write_text(yaml.safe_dump(images))
    settings_file = copy / "base" / "retrain.yaml"
    settings = yaml.safe_load(settings_file.read_text())
    settings.update(
        {
            "input": f"{bucket}/raw/rows.csv",
            "registry": f"{bucket}/registry",
            "dataset": "rows",
            "accelerator-type": "nvidia-l4",
            "accelerator-count": 2,
            "image-pull-secrets": "regcred",
            "storage-secret": "bucket-key",
        }
    )
    settings["params"] = {**settings["params"], "label": "label", "epochs": 7,
                          "learning_rate": 0.02}  # fmt: skip
    settings_file.write_text(yaml.safe_dump(settings, sort_keys=False))
    return copy


def _check_upload(upload, platform, digest=""):
    """What the uploaded pipeline must say: k8s/images' registry and tag on every step, the
    component image by its ``digest`` where k8s/images pins it (the GPU trainer, which k8s/images
    does not name, by the tag), and retrain.yaml's placement and Secrets."""
    executors = upload["deploymentSpec"]["executors"]
    pinned = f"@{digest}" if digest else ""
    for name, executor in executors.items():
        if name != "exec-train":
            assert executor["container"]["image"] == (
                f"eu.gcr.io/acme/ml/tfrecord-suite:2026.11{pinned}"
            ), name
            env = {e["name"]: e["value"] for e in executor["container"]["env"]}
            assert env["TFRECORD_SUITE_IMAGE"] == executor["container"]["image"], name
    assert executors["exec-train"]["container"]["image"] == (
        "eu.gcr.io/acme/ml/tfrecord-suite-gpu:2026.11"
    )
    train = upload["root"]["dag"]["tasks"]["train"]["inputs"]["parameters"]
    assert train["data_service_image"]["runtimeValue"]["constant"] == (
        f"eu.gcr.io/acme/ml/tfrecord-suite:2026.11{pinned}"
    )
    assert executors["exec-train"]["container"]["resources"]["accelerator"]["resourceCount"] == "2"
    k8s = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert k8s["exec-train"]["nodeSelector"]["labels"] == {
        "cloud.google.com/gke-accelerator": "nvidia-l4"
    }
    for name, executor in k8s.items():  # the Secrets reach every step
        assert [s["secretName"] for s in executor["imagePullSecret"]] == ["regcred"], name
        assert [s["secretName"] for s in executor["secretAsVolume"]] == ["bucket-key"], name


@pytest.mark.gcs
@pytest.mark.usefixtures("kubectl")
@pytest.mark.parametrize("digest", ["", DIGEST], ids=["by tag", "pinned by digest"])
def test_the_cronjob_and_ci_upload_what_the_one_settings_file_and_k8s_images_say(
    tmp_path, gcs_bucket, monkeypatch, digest
):
    """Retraining compiles what the user deployed. The CronJob as kustomize renders it (its
    args and environment as the kubelet expands them, its settings ConfigMap as mounted) and
    the CI workflow's steps that read k8s/images and retrain (as bash runs them from the
    repository root) both upload a pipeline on k8s/images' registry and tag, placed and with
    the Secrets and parameters of k8s/base/retrain.yaml, and it is the same pipeline: the same
    version (the package CI installs for that tag: tests/unit/test_release.py). With the component
    image pinned by digest the CronJob runs NAME:TAG@DIGEST, which retraining takes (it
    refused the reference before)."""
    import subprocess

    import yaml
    from click.testing import CliRunner

    from fakes import manifests
    from fakes.fakekfp import FakeKfp
    from tfrecord_suite.cli.main import main
    from tfrecord_suite.io import storage

    monkeypatch.setattr(
        "tfrecord_suite.kfp.endpoint.POD_NAMESPACE_FILE", str(tmp_path / "no-namespace")
    )
    storage.write_text(f"{gcs_bucket}/raw/rows.csv", "x,label\n1,a\n2,b\n3,a\n")
    k8s = _edited_k8s(tmp_path, gcs_bucket, digest)
    docs = manifests.render_dir(str(k8s / "overlays" / "standalone"))
    (cron,) = [d for d in docs if d["kind"] == "CronJob"]
    pod = manifests.pod_spec(cron)
    (container,) = pod["containers"]
    assert container["image"].endswith(f"tfrecord-suite:2026.11{'@' + digest if digest else ''}")
    # the ConfigMap, mounted where the pod mounts it
    mounted = tmp_path / "mounted"
    for mount in container["volumeMounts"]:
        volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
        if "configMap" in volume:
            (config_map,) = [d for d in docs if d["kind"] == "ConfigMap"
                             and d["metadata"]["name"] == volume["configMap"]["name"]]  # fmt: skip
            folder = mounted / mount["mountPath"].lstrip("/")
            folder.mkdir(parents=True)
            for key, text in config_map["data"].items():
                (folder / key).write_text(text)
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["TFRECORD_SUITE_IMAGE"] == container["image"]  # the replacement
    args = [manifests.expand(a, env) for a in container["args"]]
    args = [a.replace("=/etc/", f"={mounted}/etc/") for a in args]
    with FakeKfp() as api:
        # only where the API is differs from the cluster's
        result = CliRunner().invoke(main, [*args, "--host", api.url])
        assert result.exit_code == 0, result.output
        cron_out = json.loads(result.stdout)
        (upload,) = [r for r in api.requests if r["path"].endswith("/upload")]
        _check_upload(upload["uploaded"], upload["platform"], digest)
        (run,) = api.runs.values()
        params = run["runtime_config"]["parameters"]
        assert params["epochs"] == 7 and params["learning_rate"] == 0.02
        assert params["input_uri"] == f"{gcs_bucket}/raw/rows.csv"

        workflow = yaml.safe_load(open(os.path.join(ROOT, ".github", "workflows", "retrain.yml")))
        steps = {s.get("name"): s for s in workflow["jobs"]["retrain"]["steps"]}
        token = tmp_path / "kfp-token"
        token.write_text("t")
        outputs = tmp_path / "github_output"
        outputs.write_text("")
        ci_env = {
            **os.environ,
            "KFP_HOST": api.url,
            "KFP_NAMESPACE": "",
            "RUNNER_TEMP": str(tmp_path),
            "GITHUB_OUTPUT": str(outputs),
            "PATH": os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]]),
            "PYTHONPATH": os.pathsep.join(sys.path),
        }
        # the step that reads k8s/images, then the retrain step with the image it read
        read = subprocess.run(["bash", "-ec", steps["Deployed images"]["run"]], cwd=k8s.parent,
                              env=ci_env, capture_output=True, text=True)  # fmt: skip
        assert read.returncode == 0, read.stderr[-3000:]
        deployed = dict(line.split("=", 1) for line in outputs.read_text().split())
        assert deployed["tag"] == "2026.11"
        step = steps["Retrain what the cluster deploys"]
        assert step["env"]["IMAGE"] == "${{ steps.deployed.outputs.image }}"
        ci_env["IMAGE"] = deployed["image"]
        proc = subprocess.run(["bash", "-ec", step["run"]], cwd=k8s.parent, env=ci_env,
                              capture_output=True, text=True, timeout=600)  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        ci_out = json.loads(proc.stdout)
        assert api.errors == []
    # the same pipeline, as a version of the same pipeline
    assert ci_out["submitted"] and ci_out["pipeline_id"] == cron_out["pipeline_id"]
    (ci_upload,) = [r for r in api.requests if r["path"].endswith("/upload_version")]
    assert (ci_upload["uploaded"], ci_upload["platform"]) == (
        upload["uploaded"],
        upload["platform"],
    )
    assert len(api.runs) == 2


#: The (resource, verb) on pipelines.kubeflow.org the KFP API server authorizes each request
#: of `retrain` with in multi-user mode (backend/src/apiserver/server/: pipeline_server.go
#: listPipelines, listPipelineVersions and getPipeline; pipeline_upload_server.go
#: uploadPipeline and uploadPipelineVersion; experiment_server.go listExperiments and
#: createExperiment; run_server.go createRun and getRun). healthz is not authorized.
KFP_AUTHZ = {
    ("GET", "/apis/v2beta1/healthz"): None,
    ("GET", "/apis/v2beta1/pipelines"): ("pipelines", "list"),
    ("GET", "/apis/v2beta1/pipelines/*/versions"): ("pipelines", "list"),
    ("GET", "/apis/v2beta1/pipelines/*"): ("pipelines", "get"),
    ("POST", "/apis/v2beta1/pipelines/upload"): ("pipelines", "create"),
    ("POST", "/apis/v2beta1/pipelines/upload_version"): ("pipelines", "create"),
    ("GET", "/apis/v2beta1/experiments"): ("experiments", "list"),
    ("POST", "/apis/v2beta1/experiments"): ("experiments", "create"),
    ("POST", "/apis/v2beta1/runs"): ("runs", "create"),
    ("GET", "/apis/v2beta1/runs/*"): ("runs", "get"),
}


def _authz(method, path):
    import fnmatch

    for (m, pattern), need in KFP_AUTHZ.items():
        if m == method and fnmatch.fnmatch(path, pattern) and pattern.count("/") == path.count("/"):
            return need
    raise AssertionError(f"no authorization rule restated for {method} {path}")


def test_the_cronjobs_role_holds_exactly_what_retrain_asks_the_kfp_api_for(tmp_path, monkeypatch):
    """The Role of the CronJob's account (k8s/overlays/multi-user/retrain-role.yaml) against
    every request `retrain` makes in a profile: a first upload, a new version, an unchanged
    version reused, with --wait: each is allowed, each rule is used, and nothing deletes,
    archives, terminates or updates."""
    from click.testing import CliRunner

    from fakes import manifests
    from fakes.fakekfp import FakeKfp
    from tfrecord_suite.cli.main import main

    monkeypatch.setattr("tfrecord_suite.retrain.input_changed", lambda *a: (True, "new"))
    monkeypatch.setattr(
        "tfrecord_suite.kfp.endpoint.POD_NAMESPACE_FILE", str(tmp_path / "no-namespace")
    )
    token = tmp_path / "token"
    token.write_text("t")
    base = ["retrain", "--input", "gs://b/raw.csv", "--registry", "gs://b/reg", "--dataset",
            "rows", "--namespace", "team-a", "--token-file", str(token), "--wait",
            "--timeout", "30", "--json"]  # fmt: skip
    with FakeKfp(multi_user=True, tokens=("t",)) as api:
        for extra in ([], ["--accelerator-type", "nvidia-l4"], []):
            result = CliRunner().invoke(main, [*base, "--host", api.url, *extra])
            assert result.exit_code == 0, result.output
        used = {_authz(r["method"], r["path"]) for r in api.requests} - {None}
    (role,) = manifests.load("overlays/multi-user/retrain-role.yaml")
    granted = {
        (resource, verb)
        for rule in role["rules"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
        if rule["apiGroups"] == ["pipelines.kubeflow.org"]
    }
    assert used <= granted, used - granted
    assert granted <= used, f"granted but never used: {granted - used}"
    assert not {v for _, v in granted} & {"delete", "archive", "terminate", "update", "retry"}
    (binding,) = manifests.load("overlays/multi-user/retrain-rolebinding.yaml")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}  # fmt: skip
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "tfrecord-suite-retrain"}]
