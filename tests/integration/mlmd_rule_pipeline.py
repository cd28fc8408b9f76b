"""A one-step pipeline that gives its output artifact the metadata it is handed (JSON), for
checking ML Metadata's conversion rule against Kubeflow Pipelines' own launcher
(tests/integration/test_kfp.py). A module of its own: kfp's component decorator reads its
function's annotations as types, which ``from __future__ import annotations`` turns into
strings."""

from kfp import dsl, kubernetes

from tfrecord_suite.images import IMAGE_UID


def build(image: str):
    """The pipeline, its step on ``image`` (the suite's, which has kfp) as the images' user."""

    @dsl.component(base_image=image, install_kfp_package=False)
    def describe(metadata: str, out: dsl.Output[dsl.Artifact]):
        import json

        out.metadata.update(json.loads(metadata))
        with open(out.path, "w") as fh:
            fh.write("described")

    @dsl.pipeline(name="tfrs-mlmd-rule")
    def rule(metadata: str):
        task = describe(metadata=metadata)
        kubernetes.set_security_context(task, run_as_user=IMAGE_UID, run_as_non_root=True)

    return rule
