"""The train component: its defaults, and a run through kfp.local (the checks every folder gets
are in tests/unit/test_component_folders.py)."""

import os

import pytest

NAME = "train"


def test_defaults_are_the_train_configs():
    from component_checks import defaults

    from tfrecord_suite.launch.placement import Placement
    from tfrecord_suite.train.trainer import TrainConfig

    d = defaults(NAME)
    for key in ("strategy", "cpu_devices", "epochs", "batch_size", "learning_rate",
                "feature_config"):  # fmt: skip
        assert d[key] == getattr(TrainConfig, key), key
    assert d["launcher"] == Placement.launcher


@pytest.mark.e2e
def test_runs_in_kfp_local(train_run, version_run):
    model = train_run.outputs["model"]
    assert os.path.isfile(os.path.join(model.path, "export", "saved_model.pb"))
    assert model.metadata["dataset_digest"] == version_run["digest"]
    assert 0.0 <= train_run.outputs["metrics"].metadata["test_accuracy"] <= 1.0
