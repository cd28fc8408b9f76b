"""A pipeline using the resolve_dataset component, loaded from its released spec."""

from kfp import components, dsl

BASE = "https://raw.githubusercontent.com/tfrecord-suite/tfrecord-suite/v0.1.0/components"
resolve_dataset = components.load_component_from_url(
    f"{BASE}/data_processing/resolve_dataset/component.yaml"
)


@dsl.pipeline
def my_pipeline(dataset_ref: str):
    pinned = resolve_dataset(dataset_ref=dataset_ref)  # e.g. gs://b/registry/penguins@stable
    pinned.set_caching_options(False)  # aliases move
