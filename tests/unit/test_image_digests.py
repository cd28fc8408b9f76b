"""Images pinned by digest (k8s/images' ``digest:``, kustomize's ``NAME:TAG@DIGEST``): the image
set keeps the digest of the image it was given, the others go by the tag, and the step that
runs in such an image finds its set. The retraining path with a pinned k8s/images runs in
tests/integration/test_k8s_retrain.py."""

from __future__ import annotations

import pytest
import yaml

from fakes import manifests
from tfrecord_suite.images import DEFAULT_TAG, IMAGE_ENV, ImageReferenceError, ImageSet

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
    from tfrecord_suite.kfp.tasks import running_images

    monkeypatch.setenv(IMAGE_ENV, f"eu.gcr.io/p/ml/tfrecord-suite:2026.11@{DIGEST}")
    assert running_images().component == f"eu.gcr.io/p/ml/tfrecord-suite:2026.11@{DIGEST}"
