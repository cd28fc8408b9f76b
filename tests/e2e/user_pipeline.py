"""A pipeline as a kfp user writes it: the suite's components loaded from their committed specs
(components/<category>/<name>/component.yaml), beside a component of the user's own that reads the suite's
Dataset and Model artifacts. It imports kfp and nothing of tfrecord_suite (a test checks)."""

import os

from kfp import components, dsl
from kfp.dsl import Dataset, Input, Model

COMPONENTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "components")
IMAGE = "ghcr.io/tfrecord-suite/tfrecord-suite:0.1.0"


def load(path: str):
    return components.load_component_from_file(os.path.join(COMPONENTS, path, "component.yaml"))


fingerprint = load("data_processing/fingerprint")
shard = load("data_processing/shard")
version = load("data_processing/version")
train = load("training/train")


# The user's own step. It runs on the suite's image only because that one is here with Python
# and kfp (no registry is reachable); it imports nothing of the suite.
@dsl.component(base_image=IMAGE, install_kfp_package=False)
def audit(dataset: Input[Dataset], model: Input[Model]) -> str:
    """Check that the model was trained on this dataset version; say what both are."""
    import json
    import os

    with open(os.path.join(dataset.path, "manifest.json")) as fh:
        manifest = json.load(fh)
    export = os.path.join(model.path, model.metadata["export_subdir"])
    assert os.path.isfile(os.path.join(export, "saved_model.pb")), export
    assert model.metadata["dataset_digest"] == dataset.metadata["digest"]
    assert int(dataset.metadata["records"]) == manifest["totals"]["records"]
    return json.dumps(
        {
            "ref": dataset.metadata["ref"],
            "records": int(dataset.metadata["records"]),
            "splits": dataset.metadata["splits"],
            "export_files": sorted(os.listdir(export)),
            "trained_on": model.metadata["dataset"],
        }
    )


@dsl.pipeline(name="users-own-pipeline")
def user_pipeline(input_uri: str, registry_root: str) -> str:
    digest = fingerprint(input_uri=input_uri).set_caching_options(False)
    staged = shard(
        input_uri=input_uri,
        registry_root=registry_root,
        dataset_name="blobs",
        fingerprint=digest.output,
        label="kind",
    )
    published = version(
        staged=staged.outputs["staged"], registry_root=registry_root, dataset_name="blobs"
    ).set_caching_options(False)
    trained = train(
        dataset_ref=published.outputs["ref"],
        dataset_digest=published.outputs["digest"],
        epochs=2,
        batch_size=16,
    )
    return audit(dataset=published.outputs["dataset"], model=trained.outputs["model"]).output
