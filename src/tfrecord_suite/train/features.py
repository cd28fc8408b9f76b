"""Declarative feature transforms: a YAML/JSON config -> Keras preprocessing layers.

A feature config says how raw features become model inputs without any TensorFlow code::

    features:
      bill_length_mm: {type: numeric}                       # Normalization (train-split stats)
      body_mass_g: {type: bucketized, num_buckets: 4}        # Discretization at quantiles
      island: {type: vocabulary, top_k: 10}                  # StringLookup + Embedding
      year: {type: categorical_identity, num_buckets: 2100}  # IntegerLookup over 0..N-1
      comment: {type: hashed, num_bins: 256}                 # Hashing + Embedding
    crosses:
      - {features: [island, sex], num_bins: 32}              # HashedCrossing + Embedding
    image: {resize: [64, 64], rescale: 0.00392156862745098,
            augment: {flip: horizontal, rotation: 0.05, crop: [56, 56]}}

The transforms are split in two Keras models. The *preprocessor* (lookups, hashing, crossing,
discretization, normalization, resize and rescale; no trainable weights) runs in the tf.data
pipeline on the CPU while training (a parallel map before prefetch) and is also part of the
exported SavedModel, in front of the trained model, so serving takes raw serialized ``tf.Example``s
and computes exactly what training saw. The *model* holds what is learned: embeddings and layers.
Augmentation runs only in the training input pipeline.

Statistics come from the shard step's manifest where they suffice (mean and variance for
``numeric``); vocabularies and quantiles from one pass over the training split. The fitted state is
written next to the model (``transforms.json``), and so is the config (``feature_config.yaml``),
inferred from the schema when none is given, as a starting point to edit.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import math
from typing import Annotated, Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from tfrecord_suite.errors import UserError
from tfrecord_suite.io import storage
from tfrecord_suite.schema import Schema

CONFIG_FILE = "feature_config.yaml"
FITTED_FILE = "transforms.json"
_QUANTILE_SAMPLE = 100_000


class FeatureConfigError(UserError):
    """The feature config is malformed or does not fit the dataset; one line per problem."""


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Categorical(_Spec):
    embedding_dim: int | None = Field(
        None,
        ge=0,
        description="Embedding width; 0 for one-hot; default about the 4th root of the categories.",
    )


class Numeric(_Spec):
    """A number, normalized with the training split's mean and variance."""

    type: Literal["numeric"]
    normalize: bool = True


class Bucketized(_Categorical):
    """A number cut into buckets at ``boundaries``, or at ``num_buckets``-quantiles."""

    type: Literal["bucketized"]
    boundaries: list[float] | None = None
    num_buckets: int | None = Field(None, ge=2)

    @pydantic.model_validator(mode="after")
    def _one_of(self) -> Bucketized:
        if (self.boundaries is None) == (self.num_buckets is None):
            raise UserError("give either boundaries or num_buckets")
        if self.boundaries is not None and sorted(set(self.boundaries)) != self.boundaries:
            raise UserError("boundaries must be strictly increasing")
        return self


class CategoricalIdentity(_Categorical):
    """An integer already in ``0..num_buckets-1`` (others go to one out-of-range bucket)."""

    type: Literal["categorical_identity"]
    num_buckets: int = Field(ge=1)


class Vocabulary(_Categorical):
    """A string or integer looked up in a vocabulary: given, from a file, or the top-k seen."""

    type: Literal["vocabulary"]
    vocabulary: list[str] | list[int] | None = None
    vocabulary_file: str | None = None
    top_k: int = Field(1000, ge=1)
    oov_buckets: int = Field(1, ge=1)

    @pydantic.model_validator(mode="after")
    def _not_both(self) -> Vocabulary:
        if self.vocabulary is not None and self.vocabulary_file is not None:
            raise UserError("give vocabulary or vocabulary_file, not both")
        return self


class Hashed(_Categorical):
    """A string or integer hashed into ``num_bins`` buckets."""

    type: Literal["hashed"]
    num_bins: int = Field(ge=1)


FeatureSpec = Annotated[
    Numeric | Bucketized | CategoricalIdentity | Vocabulary | Hashed, Field(discriminator="type")
]


class Cross(_Categorical):
    """Two or more configured or raw features crossed into ``num_bins`` hashed buckets."""

    features: list[str] = Field(min_length=2)
    num_bins: int = Field(ge=1)


class Augment(_Spec):
    """Random image augmentation, applied only in the training input pipeline."""

    flip: Literal["none", "horizontal", "vertical", "horizontal_and_vertical"] = "none"
    rotation: float = Field(0.0, ge=0.0, le=0.5, description="Max rotation, fraction of 2*pi.")
    crop: tuple[int, int] | None = None


class Image(_Spec):
    """How images are fed: resized, rescaled, augmented while training."""

    resize: tuple[int, int] | None = None
    rescale: float = 1.0 / 255.0
    augment: Augment = Field(default_factory=Augment)


class FeatureConfig(_Spec):
    """Every transform of the built-in model.

    Attributes:
        features: Raw feature name -> its transform. Features not listed are not model inputs.
        crosses: Feature crosses.
        image: Image handling (image datasets).
        hidden_units: Width of the dense layers after the transformed features.

    """

    features: dict[str, FeatureSpec] = Field(default_factory=dict)
    crosses: list[Cross] = Field(default_factory=list)
    image: Image | None = None
    hidden_units: int | None = Field(None, ge=1)

    def to_yaml(self) -> str:
        """The config as YAML (what ``feature_config.yaml`` holds)."""
        import yaml

        return yaml.safe_dump(self.model_dump(mode="json", exclude_none=True), sort_keys=False)


def load_feature_config(source: str) -> FeatureConfig:
    """Read a config from a path (local or ``gs://``, YAML or JSON) or from inline YAML/JSON text.

    Raises:
        FeatureConfigError: One line per bad entry, each naming where it is.

    """
    import yaml

    where = source
    text = source
    if "\n" not in source and not source.lstrip().startswith("{"):
        try:
            text = storage.read_text(source)
        except FileNotFoundError:
            raise FeatureConfigError(f"feature config {source}: file not found") from None
    else:
        where = "feature config"
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise FeatureConfigError(f"{where}: not valid YAML/JSON ({exc})") from None
    try:
        return FeatureConfig.model_validate(data or {})
    except pydantic.ValidationError as exc:
        lines = [f"{where}: {exc.error_count()} problem(s)"]
        for err in exc.errors():
            loc = ".".join(str(p) for p in err["loc"] if not str(p).startswith("function-after"))
            lines.append(f"  {loc}: {err['msg']}")
        raise FeatureConfigError("\n".join(lines)) from None


def check_against_schema(config: FeatureConfig, schema: Schema) -> None:
    """Raise FeatureConfigError for features the dataset lacks or transforms that do not fit."""
    names = {f.name: f for f in schema.features}
    problems = []
    for name, spec in config.features.items():
        f = names.get(name)
        if f is None:
            problems.append(
                f"features.{name}: no such feature in the dataset "
                f"(it has: {', '.join(sorted(n for n in names if n != schema.label))})"
            )
            continue
        if name == schema.label:
            problems.append(f"features.{name}: is the label, not an input")
        elif f.kind in ("image", "image_raw"):
            problems.append(f"features.{name}: images are configured under 'image:'")
        elif spec.type in ("numeric", "bucketized") and f.dtype == "string":
            problems.append(f"features.{name}: {spec.type} needs a number, but it is a string")
        elif spec.type == "categorical_identity" and f.dtype != "int64":
            problems.append(f"features.{name}: categorical_identity needs int64, not {f.dtype}")
        elif spec.type in ("vocabulary", "hashed") and f.dtype == "float32":
            problems.append(f"features.{name}: {spec.type} needs a string or int64, not float32")
        elif (
            spec.type == "vocabulary"
            and spec.vocabulary_file
            and not storage.exists(spec.vocabulary_file)
        ):
            problems.append(f"features.{name}: vocabulary_file {spec.vocabulary_file} not found")
    for i, cross in enumerate(config.crosses):
        for name in cross.features:
            f = names.get(name)
            if f is None or name == schema.label:
                problems.append(f"crosses[{i}]: no input feature {name!r}")
            elif f.dtype == "float32" and not isinstance(config.features.get(name), Bucketized):
                problems.append(f"crosses[{i}]: {name} is float32; bucketize it to cross it")
    if config.image is not None and schema.source_format != "images":
        problems.append("image: the dataset has no images")
    if problems:
        raise FeatureConfigError(
            "feature config does not fit the dataset:\n  " + "\n  ".join(problems)
        )


def infer_feature_config(schema: Schema) -> FeatureConfig:
    """A sensible config from the schema: what the built-in model uses when none is given."""
    features: dict[str, Any] = {}
    image = None
    for f in schema.input_features:
        if f.kind in ("image", "image_raw"):
            image = Image()
        elif f.kind == "numeric":
            features[f.name] = Numeric(type="numeric")
        elif f.kind == "categorical":
            features[f.name] = Vocabulary(type="vocabulary")
        elif f.kind == "text":
            features[f.name] = Hashed(type="hashed", num_bins=4096, embedding_dim=16)
    return FeatureConfig(features=features, image=image)


# -------------------------------------------------------------------------------------- fitting


def fit(
    config: FeatureConfig,
    schema: Schema,
    statistics: dict[str, Any],
    files: list[str],
    compression: str = "",
) -> dict[str, Any]:
    """Compute what the transforms need from the training split; JSON-able.

    Means and variances come from the manifest's statistics; vocabularies and quantile
    boundaries from one pass over ``files`` (only when some feature needs them).
    """
    check_against_schema(config, schema)
    stats = (statistics.get("train") or {}).get("features", {})
    fitted: dict[str, Any] = {}
    need_vocab = [
        n
        for n, s in config.features.items()
        if isinstance(s, Vocabulary) and s.vocabulary is None and s.vocabulary_file is None
    ]
    need_quantiles = [
        n for n, s in config.features.items() if isinstance(s, Bucketized) and s.num_buckets
    ]
    counts, samples = _one_pass(schema, files, compression, need_vocab, need_quantiles)
    for name, spec in config.features.items():
        if isinstance(spec, Numeric):
            s = stats.get(name, {})
            std = float(s.get("std") or 0.0)
            fitted[name] = {"mean": float(s.get("mean", 0.0)), "variance": std * std or 1.0}
        elif isinstance(spec, Bucketized):
            if spec.boundaries is not None:
                bounds = list(spec.boundaries)
            else:
                bounds = _quantiles(samples.get(name, []), spec.num_buckets)
            fitted[name] = {"boundaries": bounds}
        elif isinstance(spec, Vocabulary):
            if spec.vocabulary is not None:
                vocab = list(spec.vocabulary)
            elif spec.vocabulary_file:
                lines = storage.read_text(spec.vocabulary_file).splitlines()
                vocab = [v for v in (x.strip() for x in lines) if v]
            else:
                ranked = sorted(counts.get(name, {}).items(), key=lambda kv: (-kv[1], str(kv[0])))
                vocab = [v for v, _ in ranked[: spec.top_k]]
            if schema.feature(name).dtype == "int64":
                vocab = sorted({int(v) for v in vocab})
            else:
                vocab = [str(v) for v in vocab]
            if not vocab:
                raise FeatureConfigError(f"features.{name}: the vocabulary is empty")
            fitted[name] = {"vocabulary": vocab}
    return fitted


def vocabularies(
    files: list[str], schema: Schema, compression: str = "", top_k: int = 1000
) -> dict[str, list[str]]:
    """The ``top_k`` most frequent values of each categorical string feature in ``files``.

    For a user's ``--model-fn``, which gets them in its context; one pass over the files.
    """
    names = [
        f.name for f in schema.input_features if f.kind == "categorical" and f.dtype == "string"
    ]
    counts, _ = _one_pass(schema, files, compression, names, [])
    return {
        n: [str(v) for v, _ in sorted(c.items(), key=lambda kv: (-kv[1], str(kv[0])))[:top_k]]
        for n, c in counts.items()
    }


def _one_pass(
    schema: Schema,
    files: list[str],
    compression: str,
    vocab_features: list[str],
    quantile_features: list[str],
) -> tuple[dict[str, collections.Counter], dict[str, list[float]]]:
    if not vocab_features and not quantile_features:
        return {}, {}
    import numpy as np
    import tensorflow as tf

    from tfrecord_suite.schema import parse_spec

    full = parse_spec(schema, include_label=False)
    spec = {n: full[n] for n in vocab_features + quantile_features}
    counts = {n: collections.Counter() for n in vocab_features}
    samples: dict[str, list[float]] = {n: [] for n in quantile_features}
    from tfrecord_suite.train.reader import record_dataset

    ds = record_dataset(files, compression).batch(4096)
    for batch in ds.map(lambda b: tf.io.parse_example(b, spec)):
        for n in vocab_features:
            values = np.reshape(batch[n].numpy(), [-1])
            if values.dtype == object:
                counts[n].update(v.decode() for v in values if v)
            else:
                counts[n].update(int(v) for v in values)
        for n in quantile_features:
            if len(samples[n]) < _QUANTILE_SAMPLE:
                samples[n].extend(float(v) for v in np.reshape(batch[n].numpy(), [-1]))
    return counts, samples


def _quantiles(values: list[float], buckets: int) -> list[float]:
    import numpy as np

    if not values:
        raise FeatureConfigError("bucketized feature has no values in the training split")
    qs = np.quantile(np.asarray(values, dtype=np.float64), np.linspace(0, 1, buckets + 1)[1:-1])
    return sorted({float(q) for q in qs})


# ------------------------------------------------------------------------------- Keras models


def _default_dim(categories: int) -> int:
    return max(2, math.ceil(categories**0.25))


def _cardinality(spec: Any, state: dict[str, Any]) -> int:
    """Index range the preprocessor produces for a categorical feature."""
    if isinstance(spec, Bucketized):
        return len(state["boundaries"]) + 1
    if isinstance(spec, CategoricalIdentity):
        return spec.num_buckets + 1  # plus the out-of-range bucket
    if isinstance(spec, Vocabulary):
        return len(state["vocabulary"]) + spec.oov_buckets
    return spec.num_bins  # Hashed, Cross


def cross_name(cross: Cross) -> str:
    """Output name of a cross."""
    return "_x_".join(cross.features)


def build_preprocessor(
    config: FeatureConfig,
    fitted: dict[str, Any],
    schema: Schema,
    image_shape: tuple[int, int, int] | None = None,
) -> Any:
    """Raw feature dict (as the reader yields it) -> transformed dict; no trainable weights."""
    import keras

    raw_names = set(config.features) | {n for c in config.crosses for n in c.features}
    inputs = {}
    for name in sorted(raw_names):
        f = schema.feature(name)
        inputs[name] = keras.Input(shape=(1,), name=name, dtype=f.dtype)
    outputs: dict[str, Any] = {}
    indexed: dict[str, Any] = {}
    for name, spec in config.features.items():
        x = inputs[name]
        state = fitted.get(name, {})
        if isinstance(spec, Numeric):
            x = keras.ops.cast(x, "float32")
            if spec.normalize:
                x = keras.layers.Normalization(
                    mean=state["mean"], variance=state["variance"], name=f"normalize_{name}"
                )(x)
        elif isinstance(spec, Bucketized):
            x = keras.layers.Discretization(
                bin_boundaries=state["boundaries"], name=f"bucketize_{name}"
            )(keras.ops.cast(x, "float32"))
        elif isinstance(spec, CategoricalIdentity):
            x = keras.layers.IntegerLookup(
                vocabulary=list(range(spec.num_buckets)),
                num_oov_indices=1,
                name=f"identity_{name}",
            )(x)
        elif isinstance(spec, Vocabulary):
            layer = (
                keras.layers.IntegerLookup
                if schema.feature(name).dtype == "int64"
                else keras.layers.StringLookup
            )
            x = layer(
                vocabulary=state["vocabulary"],
                num_oov_indices=spec.oov_buckets,
                name=f"lookup_{name}",
            )(x)
        elif isinstance(spec, Hashed):
            x = keras.layers.Hashing(num_bins=spec.num_bins, name=f"hash_{name}")(x)
        outputs[name] = x
        if not isinstance(spec, Numeric):
            indexed[name] = x
    for cross in config.crosses:
        parts = [indexed.get(n, inputs[n]) for n in cross.features]
        x = parts[0]
        for i, nxt in enumerate(parts[1:]):
            # HashedCrossing takes two inputs; longer crosses chain, each step hashed anew
            x = keras.layers.HashedCrossing(
                num_bins=cross.num_bins, name=f"cross_{cross_name(cross)}_{i}"
            )([keras.ops.cast(x, "int64") if i else x, nxt])
        outputs[cross_name(cross)] = keras.ops.reshape(x, (-1, 1))
    if image_shape is not None:
        h, w, c = image_shape
        img = keras.Input(shape=(h, w, c), name="image", dtype="uint8")
        inputs["image"] = img
        image = config.image or Image()
        x = keras.ops.cast(img, "float32")
        if image.resize and tuple(image.resize) != (h, w):
            # antialiased, as every resize of the reader's decoder: downscaling by more than 2
            # would otherwise alias, and the decoder's DCT-scaled and fused-crop paths, which
            # resize in its place, would see other pixels than this one
            x = keras.layers.Resizing(*image.resize, antialias=True, name="resize")(x)
        outputs["image"] = keras.layers.Rescaling(image.rescale, name="rescale")(x)
    if not outputs:
        raise FeatureConfigError("the feature config selects no model inputs")
    return keras.Model(inputs, outputs, name="preprocessor")


def transform_fn(preprocessor: Any) -> Any:
    """``features -> transformed features``: the preprocessor on the inputs it declares."""
    names = list(preprocessor.input)

    def transform(x: dict[str, Any]) -> Any:
        return preprocessor({k: x[k] for k in names})

    return transform


def image_feed(config: FeatureConfig, preprocessor: Any = None) -> Any:
    """What the model does to images after decoding, for the reader's decoder to do it cheaper.

    The resize and the training crop of the config; with the ``preprocessor``, also the transform
    of batches the decoder already cropped: the preprocessor's rescale alone (the decoder resized
    the crops). Image datasets have no other inputs; with others there is no such transform and
    the reader does not fuse.
    """
    from tfrecord_suite.train.feature_decoder import ImageFeed

    image = config.image or Image()
    feed = ImageFeed(resize=image.resize, crop=image.augment.crop)
    if preprocessor is None or not feed.crop or list(preprocessor.input) != ["image"]:
        return feed
    import keras

    rescale = preprocessor.get_layer("rescale")

    def cropped_transform(x: dict[str, Any]) -> Any:
        return {"image": rescale(keras.ops.cast(x["image"], "float32"))}

    return dataclasses.replace(feed, cropped_transform=cropped_transform)


def augment_fn(config: FeatureConfig) -> Any:
    """``features -> features`` with the image augmented (random), or None without augmentation."""
    aug = augmentation(config)
    if aug is None:
        return None

    def augment(x: dict[str, Any]) -> Any:
        return {**x, "image": aug(x["image"], training=True)}

    return augment


def augmentation(config: FeatureConfig) -> Any:
    """The training-only image augmentation as a Keras Sequential (None when there is none)."""
    import keras

    aug = (config.image or Image()).augment
    layers = []
    # the random crop changes the shape, so it lives in the model (build_model): a random window
    # while training, the central one when evaluating and serving; for JPEGs the reader decodes
    # the training window alone instead, and the model's crop lets such batches through
    if aug.flip != "none":
        layers.append(keras.layers.RandomFlip(aug.flip, name="random_flip"))
    if aug.rotation:
        layers.append(keras.layers.RandomRotation(aug.rotation, name="random_rotation"))
    return keras.Sequential(layers, name="augment") if layers else None


def build_model(config: FeatureConfig, fitted: dict[str, Any], preprocessor: Any, ctx: Any) -> Any:
    """The trainable model over the preprocessor's outputs: embeddings, layers, head.

    ``ctx`` is the :class:`~tfrecord_suite.train.model_fns.ModelContext` (classes, learning rate,
    default width).
    """
    import keras

    from tfrecord_suite.train import model_fns

    specs = {**config.features, **{cross_name(c): c for c in config.crosses}}
    inputs, encoded = {}, []
    for name, tensor in preprocessor.output.items():
        if name == "image":
            shape = tuple(tensor.shape[1:])
            crop = config.image.augment.crop if config.image else None
            # with a crop the model takes any size: whole images (cropped by TrainingCrop) and
            # training batches the reader already cropped (fused decode and crop)
            inp = keras.Input(
                shape=(None, None, shape[2]) if crop else shape, name="image", dtype="float32"
            )
            inputs["image"] = inp
            x = inp
            if crop:
                from tfrecord_suite.train.layers import TrainingCrop

                x = TrainingCrop(*crop, name="random_crop")(x)
                shape = (*crop, shape[2])
            x = keras.layers.Conv2D(32, 3, padding="same", activation="relu")(x)
            if min(shape[0], shape[1]) >= 4:
                x = keras.layers.MaxPooling2D()(x)
            x = keras.layers.Conv2D(64, 3, padding="same", activation="relu")(x)
            encoded.append(keras.layers.GlobalAveragePooling2D()(x))
            continue
        spec = specs[name]
        inp = keras.Input(shape=(1,), name=name, dtype=tensor.dtype)
        inputs[name] = inp
        if isinstance(spec, Numeric):
            encoded.append(inp)
            continue
        size = _cardinality(spec, fitted.get(name, {}))
        dim = spec.embedding_dim if spec.embedding_dim is not None else _default_dim(size)
        if dim == 0:
            x = keras.layers.CategoryEncoding(size, output_mode="one_hot", name=f"onehot_{name}")(
                inp
            )
        else:
            x = keras.layers.Flatten()(keras.layers.Embedding(size, dim, name=f"embed_{name}")(inp))
        encoded.append(x)
    x = keras.layers.Concatenate()(encoded) if len(encoded) > 1 else encoded[0]
    units = config.hidden_units or ctx.hidden_units
    x = keras.layers.Dense(units, activation="relu")(x)
    if "image" not in inputs:
        x = keras.layers.Dense(units, activation="relu")(x)
    return model_fns.compile_model(keras.Model(inputs, model_fns.head(x, ctx), name="model"), ctx)


def save(model_dir: str, config: FeatureConfig, fitted: dict[str, Any]) -> None:
    """Write the config and the fitted state next to the model."""
    storage.write_text(storage.join(model_dir, CONFIG_FILE), config.to_yaml())
    storage.write_text(
        storage.join(model_dir, FITTED_FILE), json.dumps(fitted, indent=2, sort_keys=True)
    )
