"""A pipeline using the version component, loaded from its released spec."""

from kfp import components, dsl

BASE = "https://raw.githubusercontent.com/tfrecord-suite/tfrecord-suite/v0.1.0/components"
shard = components.load_component_from_url(f"{BASE}/data_processing/shard/component.yaml")
version = components.load_component_from_url(f"{BASE}/data_processing/version/component.yaml")


@dsl.pipeline
def my_pipeline(input_uri: str, registry_root: str):
    staged = shard(input_uri=input_uri, registry_root=registry_root, dataset_name="penguins")
    published = version(
        staged=staged.outputs["staged"], registry_root=registry_root, dataset_name="penguins"
    )
    published.set_caching_options(False)  # a cached result could name a removed version
