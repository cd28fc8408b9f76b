"""A pipeline using the shard component, loaded from its released spec."""

from kfp import components, dsl

BASE = "https://raw.githubusercontent.com/tfrecord-suite/tfrecord-suite/v0.1.0/components"
fingerprint = components.load_component_from_url(
    f"{BASE}/data_processing/fingerprint/component.yaml"
)
shard = components.load_component_from_url(f"{BASE}/data_processing/shard/component.yaml")


@dsl.pipeline
def my_pipeline(input_uri: str, registry_root: str):
    digest = fingerprint(input_uri=input_uri).set_caching_options(False)
    shard(
        input_uri=input_uri,
        registry_root=registry_root,
        dataset_name="penguins",
        fingerprint=digest.output,
        label="species",
    )
