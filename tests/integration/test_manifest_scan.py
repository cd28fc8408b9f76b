"""Everything the suite puts on a cluster passes the Kubernetes checks of checkov, a standard
manifest scanner, at a pinned version (tests/realparts/checkov.py): every kustomize target under
k8s/, them all with every opt-in component, and what the launcher creates (the TrainJob and
TFJob, given to the scanner as the pods their nodes run, which it cannot see inside a custom
resource; the run's tf.data service; the step's lease). A check we deliberately do not meet is
in SKIPS, the one list of them, with its reason and, where it is narrower than every object,
the objects it is skipped for; docs/deploy.md lists them."""

from __future__ import annotations

import fnmatch
import os
import re

import pytest
import yaml
from support import unavailable

from fakes import manifests

#: ``check id -> (why we do not meet it, the resources it is skipped for: None for all)``.
#: Resources are checkov's ``Kind.namespace.name``, as fnmatch patterns.
SKIPS: dict[str, tuple[str, list[str] | None]] = {
    "CKV_K8S_11": ("No CPU limit on trainers, tf.data service workers and the dispatcher: a "
                   "limit throttles the input pipeline while cores idle; they request what "
                   "they need and have memory limits where a runaway buffer must end the pod",
                   None),
    "CKV_K8S_13": ("A trainer's memory limit is the user's (--memory-limit): by default it "
                   "may use its node's free memory, as the step's own pod does",
                   ["Pod.*.tfjob-*", "Pod.*.trainjob-*"]),
    "CKV_K8S_15": ("imagePullPolicy stays IfNotPresent: the images are pinned by release tag "
                   "or digest (k8s/images), and Always would make every pod's start depend on "
                   "the registry", None),
    "CKV_K8S_21": ("Namespaced objects carry no namespace where the user picks it: the overlays "
                   "set theirs, `kubectl apply -n` or the launcher (its own pod's) the others",
                   None),
    "CKV_K8S_35": ("The s3-keys Secret is given as environment variables by design: boto3 and "
                   "Beam's S3 filesystem read AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                   "there (gcs-key is a mounted file)", None),
    "CKV_K8S_43": ("The images are named by tag in the repository: a digest exists only once "
                   "they are pushed. k8s/images takes `digest:` for each, and every tool "
                   "follows it (tests/unit/test_image_digests.py)", None),
    "CKV_K8S_8": ("Trainers are batch pods that serve no client: a liveness probe would only "
                  "restart a training mid-epoch (the tf.data service's servers have one)",
                  ["Pod.*.tfjob-*", "Pod.*.trainjob-*"]),
    "CKV_K8S_9": ("Trainers are batch pods that serve no client: nothing routes to them by "
                  "readiness", ["Pod.*.tfjob-*", "Pod.*.trainjob-*"]),
    "CKV_K8S_22": ("Trainers keep a writable root: TensorFlow, Keras and a user's model "
                   "function write caches where they choose (HOME, the working directory)",
                   ["Pod.*.tfjob-*", "Pod.*.trainjob-*"]),
    "CKV_K8S_40": ("Trainers may run a user's own image (trainer_image), whose non-root user is "
                   "its own; the suite's images run as UID 10001",
                   ["Pod.*.tfjob-*", "Pod.*.trainjob-*"]),
    "CKV2_K8S_6": ("No NetworkPolicy selects a job's nodes yet (their TensorFlow servers "
                   "admit any pod of the namespace), nor the lease, which never runs a pod",
                   ["Pod.*.tfjob-*", "Pod.*.trainjob-*", "Pod.*.tfrs-train-x-lease*"]),
}  # fmt: skip

#: renders k8s/ with the kubectl the suite builds (conftest's ``kubectl``: fails under CI without)
needs_kubectl = pytest.mark.usefixtures("kubectl")


@pytest.fixture(scope="module")
def checkov():
    from realparts.checkov import checkov_binary

    try:
        return checkov_binary()
    except (RuntimeError, OSError) as exc:
        unavailable(f"checkov could not be installed: {exc}")


def _custom_resource_pods(docs: list[dict], runtime: dict) -> list[dict]:
    """The pods a TFJob's replicas and a TrainJob's nodes run, as Pod objects the scanner
    checks (the runtime's own template is a part of every TrainJob's node pod)."""
    pods = []
    for key, template in manifests.pod_templates(docs, runtime=runtime).items():
        if key.split("/")[0] in ("TFJob", "TrainJob"):
            pods.append({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": re.sub(r"[^a-z0-9-]", "-", key.lower()), "namespace": "ns",
                             "labels": (template.get("metadata") or {}).get("labels", {})},
                "spec": template["spec"],
            })  # fmt: skip
    return pods


def _write_everything(folder) -> None:
    for target in manifests.kustomizations():
        docs = manifests.render(target)
        (folder / f"{target.replace('/', '-')}.yaml").write_text(yaml.safe_dump_all(docs))
    every = manifests.render_with_every_component(str(folder.parent / "copy"))
    (folder / "every-component.yaml").write_text(yaml.safe_dump_all(every))
    launched = manifests.launched_objects()
    (runtime,) = manifests.load("trainer-runtime/clustertrainingruntime.yaml")
    (folder / "launched.yaml").write_text(
        yaml.safe_dump_all(launched + _custom_resource_pods(launched, runtime))
    )


def _skipped(failure: dict) -> bool:
    if failure["check_id"] not in SKIPS:
        return False
    _, resources = SKIPS[failure["check_id"]]
    return resources is None or any(fnmatch.fnmatch(failure["resource"], p) for p in resources)


@needs_kubectl
def test_every_manifest_and_launched_object_passes_the_scanner(checkov, tmp_path):
    from realparts.checkov import scan

    folder = tmp_path / "scanned"
    folder.mkdir()
    _write_everything(folder)
    failed = scan(folder, checkov)
    assert failed, "no check failed at all: the scan saw nothing (or SKIPS is stale)"
    unexpected = sorted({(f["check_id"], f["check_name"], f["resource"]) for f in failed
                         if not _skipped(f)})  # fmt: skip
    assert unexpected == []
    # every skip is still needed: each one's check fails somewhere it is skipped for
    assert sorted(SKIPS) == sorted({f["check_id"] for f in failed if _skipped(f)})


def test_the_deploy_page_lists_every_skipped_check():
    with open(os.path.join(manifests.K8S, "..", "docs", "deploy.md")) as fh:
        page = fh.read()
    section = page.split("## Manifest scanning", 1)[1].split("\n## ", 1)[0]
    assert sorted(re.findall(r"`(CKV2?_K8S_\d+)`", section)) == sorted(SKIPS)
