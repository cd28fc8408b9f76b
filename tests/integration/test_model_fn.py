"""Bring your own Keras model (``--model-fn module:function``) as users call it: a module of their
own on PYTHONPATH, trained through the CLI and through the whole pipeline in kfp.local, and a
clear error naming what is wrong when the reference is bad."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

USER_MODULE = textwrap.dedent(
    '''
    """A user's model module: nothing from tfrecord_suite but the context it is given."""
    import keras

    CALLS = []


    def tiny_cnn(ctx):
        h, w, c = ctx.image_shape
        image = keras.Input(shape=(h, w, c), name="image", dtype="uint8")
        x = keras.layers.Rescaling(1.0 / 255)(image)
        x = keras.layers.Flatten()(x)
        x = keras.layers.Dense(16, activation="relu", name="user_hidden")(x)
        out = keras.layers.Dense(ctx.num_classes, activation="softmax")(x)
        model = keras.Model({"image": image}, out, name="user_tiny_cnn")
        model.compile(
            optimizer=keras.optimizers.Adam(ctx.learning_rate),
            loss="sparse_categorical_crossentropy",
            metrics=["accuracy"],
        )
        return model
    '''
)


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    folder = tmp_path / "user_code"
    folder.mkdir()
    (folder / "my_models.py").write_text(USER_MODULE)
    path = os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("PYTHONPATH", path)
    monkeypatch.syspath_prepend(str(folder))
    return "my_models:tiny_cnn"


def _layer_names(export_dir):
    import tensorflow as tf

    loaded = tf.saved_model.load(export_dir)
    return {v.name for v in loaded.variables}


@pytest.mark.slow
def test_model_fn_through_the_cli(published_digits, tmp_path, user_module):
    model_dir = str(tmp_path / "model")
    cmd = [sys.executable, "-m", "tfrecord_suite.cli", "train", "--dataset", published_digits["ref"],
           "--model-dir", model_dir, "--epochs", "1", "--batch-size", "32",
           "--model-fn", user_module, "--json"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads(open(os.path.join(model_dir, "metrics.json")).read())
    assert 0.0 <= metrics["evaluation"]["test"]["accuracy"] <= 1.0
    assert any("user_hidden" in n for n in _layer_names(os.path.join(model_dir, "export")))


def test_bad_model_fn_fails_with_one_line_naming_it(tmp_path, user_module):
    """Before the dataset is read (this one does not exist) and TensorFlow started: a wrong
    reference costs the user a second, not a data load."""
    for spec, expected in (
        ("my_models", "write module:function"),
        ("no_such_module:build", "cannot import no_such_module"),
        ("my_models:missing", "my_models has no function 'missing'"),
    ):
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "tfrecord_suite.cli",
                "train",
                "--dataset",
                str(tmp_path / "registry" / "none@1"),
                "--model-dir",
                str(tmp_path / "m"),
                "--epochs",
                "1",
                "--model-fn",
                spec,
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode != 0
        assert expected in proc.stderr and "Traceback" not in proc.stderr, proc.stderr[-2000:]


@pytest.mark.e2e
def test_model_fn_through_the_pipeline(tmp_path, digits_dir, user_module):
    from tfrecord_suite.kfp.local_run import run_local

    result = run_local(
        input_uri=digits_dir,
        workdir=str(tmp_path / "bucket"),
        dataset_name="digits",
        epochs=1,
        model_fn=user_module,
    )
    assert any("user_hidden" in n for n in _layer_names(result["export_dir"]))
    assert 0.0 <= result["metrics"]["test_accuracy"] <= 1.0
