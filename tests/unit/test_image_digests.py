"""Images pinned by digest (k8s/images' ``digest:``, kustomize's ``NAME:TAG@DIGEST``): the image
set keeps the digest of the image it was given, the others go by the tag, and the step that
runs in such an image finds its set. The retraining path with a pinned k8s/images runs in
tests/integration/test_k8s_retrain.py."""

from __future__ import annotations

import re

import pytest
import yaml

from fakes import manifests
from tfrecord_suite.images import (
    DEFAULT_TAG,
    IMAGE_ENV,
    IMAGE_FILES,
    ImageReferenceError,
    ImageSet,
)

DIGEST = "sha256:" + "0123456789abcdef" * 4


def test_a_reference_by_tag_and_digest_keeps_both():
    pinned = ImageSet.of(f"eu.gcr.io/p/ml/tfrecord-suite:2026.11@{DIGEST}")
    assert (pinned.registry, pinned.tag) == ("eu.gcr.io/p/ml", "2026.11")
    assert pinned.component == f"eu.gcr.io/p/ml/tfrecord-suite:2026.11@{DIGEST}"
    # the digest is the component image's: the GPU trainer goes by the tag
    assert pinned.trainer("nvidia.com/gpu") == "eu.gcr.io/p/ml/tfrecord-suite-gpu:2026.11"
    assert ImageSet.find(pinned.component) == pinned


def test_a_reference_by_digest_alone_takes_the_package_version_as_tag():
    pinned = ImageSet.of(f"localhost:5000/team/tfrecord-suite-gpu@{DIGEST}")
    assert (pinned.registry, pinned.tag) == ("localhost:5000/team", DEFAULT_TAG)
    assert pinned.trainer("nvidia.com/gpu").endswith(f"tfrecord-suite-gpu:{DEFAULT_TAG}@{DIGEST}")
    assert ImageSet.of("localhost:5000/team/tfrecord-suite:1") == ImageSet(
        "localhost:5000/team", "1"
    )


@pytest.mark.parametrize(
    "bad", [f"eu.gcr.io/p/other:1@{DIGEST}", "eu.gcr.io/p/tfrecord-suite@sha256:abc",
            "eu.gcr.io/p/tfrecord-suite", "localhost:5000/tfrecord-suite"],
)  # fmt: skip
def test_bad_references_are_refused_with_what_to_write(bad):
    with pytest.raises(ImageReferenceError, match=r"REGISTRY/NAME|ALGORITHM:HEX"):
        ImageSet.of(bad)


def test_the_images_component_pinning_by_digest_gives_what_kustomize_renders(tmp_path, kubectl):
    """k8s/images with a digest on the component image: the set it names has the reference the
    rendered CronJob runs."""
    import shutil

    shutil.copytree(manifests.K8S, tmp_path / "k8s")
    component = tmp_path / "k8s" / "images" / "kustomization.yaml"
    doc = yaml.safe_load(component.read_text())
    for entry in doc["images"]:
        entry.update(newName=entry["name"].replace("ghcr.io/tfrecord-suite", "eu.gcr.io/p/ml"),
                     newTag="2026.11")  # fmt: skip
    doc["images"][0]["digest"] = DIGEST
    component.write_text(yaml.safe_dump(doc))
    chosen = ImageSet.from_kustomization(str(component.parent))
    assert chosen.component == f"eu.gcr.io/p/ml/tfrecord-suite:2026.11@{DIGEST}"
    docs = manifests.render_dir(str(tmp_path / "k8s" / "overlays" / "standalone"))
    (cron,) = [d for d in docs if d["kind"] == "CronJob"]
    assert manifests.images_in(cron) == [chosen.component]


def test_a_step_running_on_a_pinned_image_launches_its_service_on_it(monkeypatch):
    """The train step's own image is pinned: the set it finds starts the run's tf.data service
    on the same pinned image (it refused the reference before, and fell back to the defaults)."""
    from tfrecord_suite.steps import running_images

    monkeypatch.setenv(IMAGE_ENV, f"eu.gcr.io/p/ml/tfrecord-suite:2026.11@{DIGEST}")
    assert running_images().component == f"eu.gcr.io/p/ml/tfrecord-suite:2026.11@{DIGEST}"


DIGESTS = {key: f"sha256:{n}" + "0123456789abcdef" * 4 for n, key in
           enumerate(("component", "trainer-gpu", "trainer-tpu", "beam-worker"))}  # fmt: skip


def _compiled(tmp_path, *flags: str) -> str:
    from click.testing import CliRunner

    from tfrecord_suite.cli.main import main

    out = tmp_path / "retraining.yaml"
    result = CliRunner().invoke(main, ["compile", "--pipeline", "retraining", "--output", str(out),
                                       "--image-registry", "eu.gcr.io/p/ml",
                                       "--image-tag", "2026.11", *flags])  # fmt: skip
    assert result.exit_code == 0, result.output
    return out.read_text()


@pytest.mark.parametrize("accelerator", ["", "nvidia-l4"], ids=["cpu", "gpu"])
def test_compile_with_digests_names_every_image_by_its_digest(tmp_path, accelerator):
    """--image-digests: every image the compiled pipeline names (each step's container, the
    image each step records in its environment, the train step's trainer and tf.data service
    images, which the pods it creates run) is NAME:TAG@DIGEST with its own image's digest."""
    placement = (
        ["--accelerator-type", accelerator, "--accelerator-count", "1"] if accelerator else []
    )
    text = _compiled(tmp_path, *placement, "--image-digests",
                     ",".join(f"{k}={d}" for k, d in DIGESTS.items()))  # fmt: skip
    references = re.findall(r"eu\.gcr\.io/p/ml/(tfrecord-suite[a-z-]*):2026\.11(@[\w:]+)?", text)
    assert len(references) > 20
    by_repo = {repo: f"@{DIGESTS[key]}" for key, (repo, _) in IMAGE_FILES.items()}
    assert {(repo, pinned) for repo, pinned in references} == {
        (repo, by_repo[repo]) for repo, _ in references
    }
    spec = next(iter(yaml.safe_load_all(text)))
    train = spec["deploymentSpec"]["executors"]["exec-train"]["container"]
    trainer = "tfrecord-suite-gpu" if accelerator else "tfrecord-suite"
    assert train["image"] == f"eu.gcr.io/p/ml/{trainer}:2026.11@{by_repo[trainer][1:]}"
    task = spec["root"]["dag"]["tasks"]["train"]["inputs"]["parameters"]
    assert task["trainer_image"]["runtimeValue"]["constant"] == train["image"]
    assert task["data_service_image"]["runtimeValue"]["constant"] == (
        f"eu.gcr.io/p/ml/tfrecord-suite:2026.11@{DIGESTS['component']}"
    )


def test_without_digests_the_compiled_pipeline_names_tags_only(tmp_path):
    assert "@sha256:" not in _compiled(tmp_path)


@pytest.mark.parametrize("bad", ["component", "component=", "=sha256:" + "ab" * 32,
                                 "gpu=sha256:" + "ab" * 32, "component=sha256:abc"])  # fmt: skip
def test_bad_image_digests_are_refused_with_what_to_write(tmp_path, bad):
    from click.testing import CliRunner

    from tfrecord_suite.cli.main import main

    result = CliRunner().invoke(main, ["compile", "--output", str(tmp_path / "p.yaml"),
                                       "--image-digests", bad])  # fmt: skip
    assert result.exit_code == 2, result.output
    assert re.search(r"IMAGE=DIGEST|not one of the images|ALGORITHM:HEX", result.output), (
        result.output
    )


def test_retrain_image_carries_its_digest_beside_the_others():
    """retrain --image NAME:TAG@DIGEST (what the CronJob and CI pass) keeps that digest, and
    --image-digests' others."""
    from tfrecord_suite.kfp.task_placement import Deployment

    pinned = Deployment.of_image(f"eu.gcr.io/p/ml/tfrecord-suite:2026.11@{DIGEST}")
    assert pinned.images.component == f"eu.gcr.io/p/ml/tfrecord-suite:2026.11@{DIGEST}"
    assert ImageSet.parse_digests(pinned.image_digests) == (("component", DIGEST),)
