"""A pipeline using the fingerprint component, loaded from its released spec."""

from kfp import components, dsl

BASE = "https://raw.githubusercontent.com/tfrecord-suite/tfrecord-suite/v0.1.0/components"
fingerprint = components.load_component_from_url(
    f"{BASE}/data_processing/fingerprint/component.yaml"
)


@dsl.pipeline
def my_pipeline(input_uri: str):
    digest = fingerprint(input_uri=input_uri)
    digest.set_caching_options(False)  # the files under one URI may change
