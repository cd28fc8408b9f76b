"""Declarative feature transforms: config validation, each transform kind, inference from the
schema, and train/serve consistency of the exported model on raw examples."""

import json
import math
import os

import numpy as np
import pytest
import tensorflow as tf
from click.testing import CliRunner
from support import served_probabilities

from tfrecord_suite.schema import Feature, Schema
from tfrecord_suite.train import features as F

TOY = Schema(
    [
        Feature("x", "float32"),
        Feature("n", "int64"),
        Feature("color", "string", kind="categorical", default=""),
        Feature("code", "int64", kind="categorical", default=0),
        Feature("note", "string", kind="text", default=""),
        Feature("label", "int64", kind="categorical", default=0),
    ],
    label="label",
    label_classes=["a", "b"],
    source_format="jsonl",
)


def batch(**cols):
    out = {}
    for k, v in cols.items():
        dtype = {"x": tf.float32, "n": tf.int64, "code": tf.int64}.get(k, tf.string)
        out[k] = tf.constant([[x] for x in v], dtype=dtype)
    return out


def test_bad_config_lists_every_problem_with_its_place(tmp_path):
    path = tmp_path / "f.yaml"
    path.write_text(
        "features:\n"
        "  x: {type: numerc}\n"
        "  n: {type: bucketized, boundaries: [3, 1]}\n"
        "  color: {type: hashed, num_bins: 0}\n"
        "  code: {type: vocabulary, vocabulary: [1], vocabulary_file: v.txt}\n"
        "crosses:\n"
        "  - {features: [color], num_bins: 8}\n"
        "colour: 1\n"
    )
    with pytest.raises(F.FeatureConfigError) as err:
        F.load_feature_config(str(path))
    text = str(err.value)
    assert text.startswith(f"{path}: 6 problem(s)")
    assert "features.x: Input tag 'numerc' found using 'type' does not match" in text
    assert "features.n.bucketized: Value error, boundaries must be strictly increasing" in text
    assert "features.color.hashed.num_bins: Input should be greater than or equal to 1" in text
    assert "give vocabulary or vocabulary_file, not both" in text
    assert "crosses.0.features: List should have at least 2 items" in text
    assert "colour: Extra inputs are not permitted" in text
    with pytest.raises(F.FeatureConfigError, match=r"missing\.yaml: file not found"):
        F.load_feature_config(str(tmp_path / "missing.yaml"))


def test_config_that_does_not_fit_the_dataset(tmp_path):
    cfg = F.load_feature_config(
        json.dumps(
            {
                "features": {
                    "colr": {"type": "numeric"},
                    "color": {"type": "numeric"},
                    "x": {"type": "vocabulary"},
                    "code": {"type": "vocabulary", "vocabulary_file": str(tmp_path / "no.txt")},
                    "label": {"type": "numeric"},
                },
                "crosses": [{"features": ["x", "color"], "num_bins": 4}],
            }
        )
    )
    with pytest.raises(F.FeatureConfigError) as err:
        F.check_against_schema(cfg, TOY)
    text = str(err.value)
    assert "features.colr: no such feature in the dataset (it has: code, color, n, note, x)" in text
    assert "features.color: numeric needs a number, but it is a string" in text
    assert "features.x: vocabulary needs a string or int64, not float32" in text
    assert "no.txt not found" in text
    assert "features.label: is the label, not an input" in text
    assert "crosses[0]: x is float32; bucketize it to cross it" in text


def test_every_transform_kind(tmp_path):
    vocab_file = tmp_path / "codes.txt"
    vocab_file.write_text("7\n9\n")
    cfg = F.FeatureConfig.model_validate(
        {
            "features": {
                "x": {"type": "numeric"},
                "n": {"type": "bucketized", "boundaries": [0, 10]},
                "color": {"type": "vocabulary", "vocabulary": ["red", "green"], "oov_buckets": 2},
                "code": {"type": "vocabulary", "vocabulary_file": str(vocab_file)},
                "note": {"type": "hashed", "num_bins": 5},
            },
            "crosses": [{"features": ["color", "n"], "num_bins": 3}],
        }
    )
    stats = {"train": {"features": {"x": {"mean": 2.0, "std": 2.0}}}}
    fitted = F.fit(cfg, TOY, stats, files=[])
    assert fitted["code"] == {"vocabulary": [7, 9]}
    prep = F.build_preprocessor(cfg, fitted, TOY)
    out = prep(
        batch(x=[2.0, 6.0], n=[-5, 12], color=["green", "blue"], code=[9, 1], note=["a", "b"])
    )
    np.testing.assert_allclose(out["x"].numpy().ravel(), [0.0, 2.0], atol=1e-6)
    assert out["n"].numpy().ravel().tolist() == [0, 2]  # below 0 / above 10
    assert out["color"].numpy().ravel().tolist() == [3, 1]  # 2 OOV slots first, then red, green
    assert out["code"].numpy().ravel().tolist() == [2, 0]  # 9 -> second entry; 1 -> OOV
    assert all(0 <= v < 5 for v in out["note"].numpy().ravel())
    assert all(0 <= v < 3 for v in out["color_x_n"].numpy().ravel())
    identity = F.FeatureConfig.model_validate(
        {"features": {"code": {"type": "categorical_identity", "num_buckets": 3}}}
    )
    p = F.build_preprocessor(identity, {}, TOY)
    assert p(batch(code=[0, 2, 5]))["code"].numpy().ravel().tolist() == [1, 3, 0]  # 0: out of range
    from tfrecord_suite.train.model_fns import ModelContext

    ctx = ModelContext(TOY, {}, {}, None, 2)
    model = F.build_model(cfg, fitted, prep, ctx)
    size = 2 + 2  # vocabulary + OOV buckets
    assert model.get_layer("embed_color").output_dim == max(2, math.ceil(size**0.25))
    assert model.get_layer("embed_note").input_dim == 5
    onehot = F.FeatureConfig.model_validate(
        {"features": {"n": {"type": "bucketized", "boundaries": [1], "embedding_dim": 0}}}
    )
    m = F.build_model(onehot, {"n": {"boundaries": [1.0]}}, F.build_preprocessor(
        onehot, {"n": {"boundaries": [1.0]}}, TOY), ctx)  # fmt: skip
    assert m.get_layer("onehot_n").num_tokens == 2


def test_vocabularies_and_quantiles_come_from_one_pass_over_train(tmp_path):
    path = str(tmp_path / "train.tfrecord")
    with tf.io.TFRecordWriter(path) as w:
        for i in range(100):
            ex = tf.train.Example()
            ex.features.feature["x"].float_list.value.append(float(i))
            ex.features.feature["n"].int64_list.value.append(i % 4)
            ex.features.feature["color"].bytes_list.value.append(
                [b"red", b"red", b"green", b"blue"][i % 4]
            )
            w.write(ex.SerializeToString())
    cfg = F.FeatureConfig.model_validate(
        {
            "features": {
                "x": {"type": "bucketized", "num_buckets": 4},
                "color": {"type": "vocabulary", "top_k": 2},
                "n": {"type": "vocabulary"},
            }
        }
    )
    fitted = F.fit(cfg, TOY, {}, [path])
    np.testing.assert_allclose(fitted["x"]["boundaries"], [24.75, 49.5, 74.25])
    assert fitted["color"]["vocabulary"] == ["red", "blue"]  # by count, ties alphabetically
    assert fitted["n"]["vocabulary"] == [0, 1, 2, 3]


def test_inferred_config_from_the_schema():
    cfg = F.infer_feature_config(TOY)
    kinds = {k: v.type for k, v in cfg.features.items()}
    assert kinds == {
        "x": "numeric",
        "n": "numeric",
        "color": "vocabulary",
        "code": "vocabulary",
        "note": "hashed",
    }
    assert F.load_feature_config(cfg.to_yaml()) == cfg  # the written file loads back


def test_image_resize_and_training_only_augmentation():
    schema = Schema(
        [Feature("image", "string", kind="image"), Feature("label", "int64", kind="categorical")],
        label="label",
        label_classes=["a", "b"],
        source_format="images",
    )
    cfg = F.FeatureConfig.model_validate(
        {"image": {"resize": [4, 4], "augment": {"flip": "horizontal", "crop": [3, 3]}}}
    )
    prep = F.build_preprocessor(cfg, {}, schema, image_shape=(8, 8, 1))
    img = tf.cast(tf.reshape(tf.range(64 * 2) % 256, (2, 8, 8, 1)), tf.uint8)
    out = prep({"image": img})["image"]
    assert out.shape == (2, 4, 4, 1) and float(tf.reduce_max(out)) <= 1.0
    augmented = F.augment_fn(cfg)({"image": out})["image"]
    assert augmented.shape == (2, 4, 4, 1)
    assert F.augment_fn(F.FeatureConfig()) is None
    from tfrecord_suite.train.model_fns import ModelContext

    model = F.build_model(cfg, {}, prep, ModelContext(schema, {}, {}, (8, 8, 1), 2))
    crop = model.get_layer("random_crop")
    assert crop(out, training=True).shape == crop(out, training=False).shape == (2, 3, 3, 1)
    assert model.predict_on_batch({"image": out}).shape == (2, 2)


@pytest.fixture(scope="module")
def published_penguins(tmp_path_factory):
    from tfrecord_suite import demo_data
    from tfrecord_suite.registry.datasets import Registry
    from tfrecord_suite.shard.step import ShardConfig, run_shard

    base = tmp_path_factory.mktemp("peng")
    csv = demo_data.write_penguins(str(base / "penguins.csv"))
    run_shard(ShardConfig(input=csv, output=str(base / "staged"), num_shards=2))
    result = Registry(str(base / "registry")).publish(str(base / "staged"), "penguins")
    return {"ref": f"{base}/registry/penguins@{result.version}", "uri": result.uri}


@pytest.mark.slow
def test_train_and_serve_give_the_same_predictions(published_penguins, tmp_path):
    """Raw test examples through the training-time pipeline and through the serving signature."""
    import keras

    from tfrecord_suite.registry.datasets import shard_uris
    from tfrecord_suite.registry.manifest import Manifest
    from tfrecord_suite.train.reader import make_dataset
    from tfrecord_suite.train.reader_config import ReaderConfig
    from tfrecord_suite.train.trainer import TrainConfig, run_train

    config = {
        "features": {
            "bill_length_mm": {"type": "numeric"},
            "flipper_length_mm": {"type": "bucketized", "num_buckets": 5},
            "body_mass_g": {"type": "bucketized", "boundaries": [3500, 4500, 5500]},
            "island": {"type": "vocabulary"},
            "sex": {"type": "vocabulary", "vocabulary": ["male", "female"]},
            "year": {"type": "hashed", "num_bins": 8, "embedding_dim": 0},
        },
        "crosses": [{"features": ["island", "sex"], "num_bins": 16}],
    }
    cfg_path = tmp_path / "features.yaml"
    cfg_path.write_text(json.dumps(config))
    model_dir = str(tmp_path / "model")
    metrics = run_train(
        TrainConfig(
            dataset=published_penguins["ref"],
            model_dir=model_dir,
            epochs=15,
            batch_size=16,
            learning_rate=0.01,
            feature_config=str(cfg_path),
            probe_steps=0,
            reproducible=True,
        )
    )
    assert metrics.evaluation["test"]["accuracy"] > 0.8
    saved = F.load_feature_config(os.path.join(model_dir, F.CONFIG_FILE))
    assert set(saved.features) == set(config["features"])
    fitted = json.load(open(os.path.join(model_dir, F.FITTED_FILE)))
    assert len(fitted["flipper_length_mm"]["boundaries"]) == 4
    assert fitted["island"]["vocabulary"][0] == "Biscoe"  # most frequent first

    uri = published_penguins["uri"]
    manifest = Manifest.load(open(os.path.join(uri, "manifest.json")).read())
    files = shard_uris(manifest, uri, "test")
    schema = Schema.from_dict(manifest.schema)
    # the training-time path: reader -> preprocessor as a parallel tf.data map -> trained model
    prep = F.build_preprocessor(F.load_feature_config(str(cfg_path)), fitted, schema)
    reader = ReaderConfig(batch_size=64, shuffle_files=False, cycle_length=1, deterministic=True)
    ds = make_dataset(files, schema, reader, training=False, transform=F.transform_fn(prep))
    trained = keras.saving.load_model(os.path.join(model_dir, "model.keras"))
    in_training = np.concatenate([trained.predict_on_batch(x) for x, _ in ds])
    # the serving path: raw serialized examples -> the exported signature
    served = served_probabilities(metrics.export_dir, files, 64)
    assert in_training.shape == served.shape == (manifest.splits["test"]["records"], 3)
    np.testing.assert_allclose(in_training, served, rtol=1e-5, atol=1e-6)


def test_cli_rejects_a_bad_feature_config(tmp_path):
    from tfrecord_suite.cli.main import main

    bad = tmp_path / "f.yaml"
    bad.write_text("features: {x: {type: hashed}}\n")
    r = CliRunner().invoke(
        main,
        ["train", "--dataset", "r/d@1", "--model-dir", str(tmp_path), "--feature-config", str(bad)],
    )
    assert r.exit_code == 2
    assert "features.x.hashed.num_bins: Field required" in r.output


def test_readme_configs_fit_the_demo_data(published_penguins, published_digits):
    """The two configs the model how-to shows load and fit the demo datasets (docs cannot rot)."""
    import re

    from tfrecord_suite.registry.datasets import Registry

    page = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "how-to", "your-model.md")
    section = open(page).read().split("## Feature transforms", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```yaml\n(.*?)```", section, re.S)
    assert len(blocks) == 2
    for block, pub in zip(blocks, [published_penguins, published_digits], strict=True):
        reg, name, version = Registry.resolve_ref(pub["ref"])
        schema = Schema.from_dict(reg.manifest(name, version).schema)
        F.check_against_schema(F.load_feature_config(block), schema)
