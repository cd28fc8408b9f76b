"""Each component run alone through kfp.local, as kubeflow/pipelines-components tests each one.

The components are loaded from their committed ``components/<category>/<name>/component.yaml``, as a user
loads them. A component whose inputs are another's outputs takes them from that component's own
run, brought in with ``dsl.importer``, and their metadata as ML Metadata hands it to a step on a
cluster (numbers as doubles, lists and structs wrapped: ``tests/fakes/launcher.py``). The runs
are session fixtures, so any one component test runs alone (``-k``).
"""

from typing import NamedTuple

import pytest

RUN = "components-local-run"


@pytest.fixture(scope="session")
def local_root(tmp_path_factory):
    """kfp.local on the host (SubprocessRunner), the run id a pod would get from its label."""
    from kfp import local

    from tfrecord_suite.podinfo import RUN_ID_ENV

    mp = pytest.MonkeyPatch()
    mp.setenv(RUN_ID_ENV, RUN)
    root = tmp_path_factory.mktemp("kfp-components")
    local.init(
        runner=local.SubprocessRunner(use_venv=False),
        pipeline_root=str(root / "pipeline_root"),
        raise_on_error=True,
    )
    yield {"registry": str(root / "registry"), "pipeline_root": str(root / "pipeline_root")}
    mp.undo()


@pytest.fixture(scope="session")
def digits(tmp_path_factory) -> str:
    """scikit-learn's handwritten digits as a folder of PNG images per class."""
    from tfrecord_suite import demo_data

    return demo_data.write_digits(str(tmp_path_factory.mktemp("digits") / "digits"))


@pytest.fixture(scope="session")
def fingerprint_run(local_root, digits):
    from component_checks import imported, load  # noqa: F401 - on the tests' path

    return load("fingerprint")(input_uri=digits)


@pytest.fixture(scope="session")
def shard_run(local_root, digits, fingerprint_run):
    from component_checks import imported, load  # noqa: F401 - on the tests' path

    # only the required inputs and the fingerprint: every other input has its default
    return load("shard")(
        input_uri=digits,
        registry_root=local_root["registry"],
        dataset_name="digits",
        fingerprint=fingerprint_run.output,
    )


@pytest.fixture(scope="session")
def version_run(local_root, shard_run):
    from component_checks import imported, load
    from kfp import dsl
    from kfp.dsl import Dataset

    version = load("version")
    outputs = NamedTuple("Outputs", [("ref", str), ("digest", str), ("dataset", Dataset)])  # noqa: UP014 - the form kfp documents

    @dsl.pipeline
    def version_alone(registry_root: str) -> outputs:
        task = version(
            staged=imported(shard_run.outputs["staged"], Dataset),
            registry_root=registry_root,
            dataset_name="digits",
        )
        return outputs(task.outputs["ref"], task.outputs["digest"], task.outputs["dataset"])

    return version_alone(registry_root=local_root["registry"]).outputs


@pytest.fixture(scope="session")
def train_run(local_root, version_run):
    from component_checks import imported, load  # noqa: F401 - on the tests' path

    return load("train")(
        dataset_ref=version_run["ref"],
        dataset_digest=version_run["digest"],
        epochs=2,
        batch_size=32,
        learning_rate=0.003,
    )


@pytest.fixture(scope="session")
def evaluate_run(local_root, version_run, train_run):
    from component_checks import imported, load
    from kfp import dsl
    from kfp.dsl import Dataset, Markdown, Metrics, Model

    evaluate = load("evaluate")
    outputs = NamedTuple(  # noqa: UP014 - the form kfp documents
        "Outputs", [("gate", str), ("evaluation", Metrics), ("decision", Markdown)]
    )

    @dsl.pipeline
    def evaluate_alone() -> outputs:
        task = evaluate(
            dataset=imported(version_run["dataset"], Dataset),
            model=imported(train_run.outputs["model"], Model),
        )
        return outputs(task.outputs["Output"], task.outputs["evaluation"],
                       task.outputs["decision"])  # fmt: skip

    return evaluate_alone().outputs


@pytest.fixture(scope="session")
def register_run(local_root, version_run, train_run, evaluate_run):
    from component_checks import imported, load
    from kfp import dsl
    from kfp.dsl import Dataset, Markdown, Model

    register = load("register")
    outputs = NamedTuple("Outputs", [("number", int), ("registered", Model)])  # noqa: UP014 - the form kfp documents

    @dsl.pipeline
    def register_alone() -> outputs:
        task = register(
            dataset=imported(version_run["dataset"], Dataset),
            model=imported(train_run.outputs["model"], Model),
            decision=imported(evaluate_run["decision"], Markdown),
        )
        return outputs(task.outputs["Output"], task.outputs["registered"])

    return register_alone().outputs
