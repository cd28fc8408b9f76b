"""A pipeline using the register component, loaded from its released spec."""

from kfp import components, dsl

BASE = "https://raw.githubusercontent.com/tfrecord-suite/tfrecord-suite/v0.1.0/components"
resolve_dataset = components.load_component_from_url(
    f"{BASE}/data_processing/resolve_dataset/component.yaml"
)
train = components.load_component_from_url(f"{BASE}/training/train/component.yaml")
evaluate = components.load_component_from_url(f"{BASE}/evaluation/evaluate/component.yaml")
register = components.load_component_from_url(f"{BASE}/deployment/register/component.yaml")


@dsl.pipeline
def my_pipeline(dataset_ref: str):
    pinned = resolve_dataset(dataset_ref=dataset_ref).set_caching_options(False)  # aliases move
    trained = train(dataset_ref=pinned.outputs["ref"], dataset_digest=pinned.outputs["digest"])
    scored = evaluate(dataset=pinned.outputs["dataset"], model=trained.outputs["model"])
    register(
        dataset=pinned.outputs["dataset"],
        model=trained.outputs["model"],
        decision=scored.outputs["decision"],
    ).set_caching_options(False)
