"""The feature spec written next to every set of shards.

A :class:`Schema` says, for every feature of the ``tf.train.Example`` records: its name, dtype,
shape, kind, default for missing values, and which feature is the label with its class names. A
reader turns it into a ``tf.io.parse_example`` spec with :func:`parse_spec` and no user code.

Kept free of TensorFlow so schemas can be inferred, diffed and validated anywhere.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tfrecord_suite.errors import UserError

SCHEMA_VERSION = 1
DTYPES = ("int64", "float32", "string")
KINDS = ("numeric", "categorical", "text", "image", "image_raw", "meta")
LABEL_NAME_CANDIDATES = ("label", "labels", "target", "class", "y", "species", "category")
DEFAULT_NA_VALUES = ("", "NA", "N/A", "NaN", "nan", "null", "NULL", "None", "?")
_SAFE_NAME = re.compile(r"[^0-9A-Za-z_]")
MAX_CATEGORICAL_CARDINALITY = 1000
MAX_CATEGORICAL_LENGTH = 64
_NUMERIC_SHARE = 0.99


class SchemaError(UserError):
    """A schema is invalid or does not fit the data; the message names the feature."""


@dataclasses.dataclass
class Feature:
    """One feature of the records.

    Attributes:
        name: Feature key in the ``tf.train.Example`` (letters, digits and ``_``).
        dtype: ``int64``, ``float32`` or ``string`` (bytes).
        shape: ``[]`` for a scalar, ``[H, W, C]`` for raw decoded pixels.
        kind: How a model should treat it: ``numeric``, ``categorical``, ``text``, ``image``
            (encoded bytes), ``image_raw`` (decoded uint8 pixels) or ``meta`` (not a model input).
        default: Value the parser substitutes when the record lacks the feature (missing cell).
        source: Column or field name in the raw data, if it differs from ``name``.

    """

    name: str
    dtype: str
    shape: list[int] = dataclasses.field(default_factory=list)
    kind: str = "numeric"
    default: Any = None
    source: str | None = None

    def validate(self) -> None:
        """Raise :class:`SchemaError` if the feature is malformed."""
        if not self.name or _SAFE_NAME.search(self.name):
            raise SchemaError(f"feature name {self.name!r}: use letters, digits and '_' only")
        if self.dtype not in DTYPES:
            raise SchemaError(f"feature {self.name!r}: dtype {self.dtype!r} not in {DTYPES}")
        if self.kind not in KINDS:
            raise SchemaError(f"feature {self.name!r}: kind {self.kind!r} not in {KINDS}")
        if any((not isinstance(d, int)) or d <= 0 for d in self.shape):
            raise SchemaError(f"feature {self.name!r}: shape {self.shape} must be positive ints")


@dataclasses.dataclass
class Schema:
    """The feature spec of a dataset.

    Attributes:
        features: Features in record order.
        label: Name of the label feature, or None for unlabelled data.
        label_classes: Class names; the label feature holds the index into this list when it is
            ``int64`` and the class name when it is ``string``.
        label_encoding: ``index`` when the label feature holds the position in
            ``label_classes`` (image folders), ``value`` when it holds the class itself (a CSV
            column); readers map ``value`` labels to indices with a lookup over the classes.
        source_format: The raw format the records came from (``csv``, ``images``...).

    """

    features: list[Feature]
    label: str | None = None
    label_classes: list[str] | None = None
    label_encoding: str = "value"
    source_format: str = ""

    def __post_init__(self) -> None:
        names = [f.name for f in self.features]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise SchemaError(f"duplicate feature names: {dupes}")
        for f in self.features:
            f.validate()
        if self.label is not None and self.label not in names:
            raise SchemaError(f"label {self.label!r} is not a feature ({names})")
        if self.label_encoding not in ("index", "value"):
            raise SchemaError(f"label_encoding {self.label_encoding!r} must be index or value")

    def feature(self, name: str) -> Feature:
        """The feature called ``name``."""
        for f in self.features:
            if f.name == name:
                return f
        raise SchemaError(f"no feature named {name!r}; features: {[f.name for f in self.features]}")

    @property
    def input_features(self) -> list[Feature]:
        """Features a model takes as input (not the label, not metadata)."""
        return [f for f in self.features if f.name != self.label and f.kind != "meta"]

    @property
    def num_classes(self) -> int | None:
        """Number of label classes, if known."""
        return len(self.label_classes) if self.label_classes else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "schema_version": SCHEMA_VERSION,
            "source_format": self.source_format,
            "label": self.label,
            "label_classes": self.label_classes,
            "label_encoding": self.label_encoding,
            "features": [_drop_none(dataclasses.asdict(f)) for f in self.features],
        }

    def to_json(self) -> str:
        """Stable, pretty JSON."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Schema:
        """Build from :meth:`to_dict` output, raising :class:`SchemaError` on bad input."""
        if not isinstance(data, Mapping) or not isinstance(data.get("features"), list):
            raise SchemaError("a schema needs a 'features' list")
        features = []
        for i, raw in enumerate(data["features"]):
            if not isinstance(raw, Mapping):
                raise SchemaError(f"features[{i}] must be an object")
            known = {f.name for f in dataclasses.fields(Feature)}
            unknown = set(raw) - known
            if unknown:
                raise SchemaError(f"features[{i}]: unknown keys {sorted(unknown)}")
            try:
                features.append(Feature(**raw))
            except TypeError as exc:
                raise SchemaError(f"features[{i}]: {exc}") from exc
        classes = data.get("label_classes")
        return cls(
            features=features,
            label=data.get("label"),
            label_classes=[str(c) for c in classes] if classes else None,
            label_encoding=str(data.get("label_encoding", "value")),
            source_format=str(data.get("source_format", "")),
        )

    @classmethod
    def from_json(cls, text: str) -> Schema:
        """Parse :meth:`to_json` output."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SchemaError(f"schema is not valid JSON: {exc}") from exc
        return cls.from_dict(data)


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def safe_feature_name(column: str) -> str:
    """A feature name made of letters, digits and ``_`` for an arbitrary column name."""
    name = _SAFE_NAME.sub("_", column.strip()).strip("_") or "feature"
    return f"f_{name}" if name[0].isdigit() else name


# ------------------------------------------------------------------------------------- inference


def parse_scalar(value: Any, na_values: Sequence[str] = DEFAULT_NA_VALUES) -> Any:
    """Normalise one raw cell: None for missing, otherwise the value unchanged (str stripped)."""
    if value is None:
        return None
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, str):
        value = value.strip()
        if value in na_values:
            return None
    return value


def is_integer(v: Any) -> bool:
    """Whether schema inference counts a present value as an integer (``int(str(v))`` reads it)."""
    if isinstance(v, bool):
        return True
    if isinstance(v, int):
        return True
    if isinstance(v, float):
        return False
    try:
        int(str(v))
    except ValueError:
        return False
    return True


def is_finite_number(v: Any) -> bool:
    """Whether schema inference counts a present value as a number (a finite ``float(str(v))``)."""
    if isinstance(v, int | float):
        return True
    try:
        f = float(str(v))
    except ValueError:
        return False
    return math.isfinite(f)


@dataclasses.dataclass
class ColumnSample:
    """What schema inference needs of a column's sampled values (the present ones, in order).

    Attributes:
        present: Values present (not missing: not null, NaN or an NA string after stripping).
        ints: ``int(v)`` of each value that is an integer (``is_integer``), in order.
        floats: ``float(v)`` of each value that is a finite number (``is_finite_number``), in order.
        texts: The distinct ``str(v)``, or None once there are more than
            :data:`MAX_CATEGORICAL_CARDINALITY` of them.
        short: Whether every ``str(v)`` is at most :data:`MAX_CATEGORICAL_LENGTH` characters.

    """

    present: int = 0
    ints: list[int] = dataclasses.field(default_factory=list)
    floats: list[float] = dataclasses.field(default_factory=list)
    texts: set[str] | None = dataclasses.field(default_factory=set)
    short: bool = True

    def add(self, values: Iterable[Any]) -> None:
        """Fold in present values (each already through :func:`parse_scalar`)."""
        for v in values:
            self.present += 1
            if is_integer(v):
                self.ints.append(int(v))
            if is_finite_number(v):
                self.floats.append(float(v))
            text = str(v)
            self.short = self.short and len(text) <= MAX_CATEGORICAL_LENGTH
            self.add_texts([text])

    def add_texts(self, texts: Iterable[str]) -> None:
        """Fold in distinct texts (keeping none once there are too many)."""
        if self.texts is not None:
            self.texts.update(texts)
            if len(self.texts) > MAX_CATEGORICAL_CARDINALITY:
                self.texts = None

    def extend(self, other: ColumnSample) -> None:
        """Append another sample's values (the next file's)."""
        self.present += other.present
        self.ints += other.ints
        self.floats += other.floats
        self.short = self.short and other.short
        if other.texts is None:
            self.texts = None
        else:
            self.add_texts(other.texts)


def infer_tabular_schema(
    columns: Sequence[str],
    rows: Iterable[Mapping[str, Any]],
    label: str | None = None,
    source_format: str = "csv",
    na_values: Sequence[str] = DEFAULT_NA_VALUES,
) -> Schema:
    """Infer a schema from sample rows of a table.

    Each column becomes ``int64`` if (nearly) every present value is an integer, ``float32`` if
    (nearly) every value is a number, else ``string``; short, low-cardinality strings are
    ``categorical``, the rest ``text``. "Nearly": up to 1% of the sampled values may fail to parse,
    so one typo does not turn a numeric column into strings; such rows become dead letters.
    The label is ``label`` if given, else the first column named like a label.

    Args:
        columns: Column names in file order.
        rows: Sample rows (dicts keyed by column).
        label: Label column, or None to auto-detect (no label if none matches).
        source_format: Recorded in the schema.
        na_values: Strings that mean "missing".

    Raises:
        SchemaError: If the label column does not exist or the columns clash after sanitising.

    """
    samples = {c: ColumnSample() for c in columns}
    for row in rows:
        for c in columns:
            v = parse_scalar(row.get(c), na_values)
            if v is not None:
                samples[c].add([v])
    return schema_of_samples(columns, samples, label, source_format)


def schema_of_samples(
    columns: Sequence[str],
    samples: Mapping[str, ColumnSample],
    label: str | None = None,
    source_format: str = "csv",
) -> Schema:
    """The schema :func:`infer_tabular_schema` infers, from each column's sample.

    The shard step's batch path samples the columns itself (:mod:`tfrecord_suite.shard.sample`)
    and decides by this same rule.

    Raises:
        SchemaError: If the label column does not exist or the columns clash after sanitising.

    """
    if label is not None and label not in columns:
        raise SchemaError(f"label column {label!r} not found; columns are {list(columns)}")
    if label is None:
        lowered = {c.lower(): c for c in columns}
        label = next((lowered[n] for n in LABEL_NAME_CANDIDATES if n in lowered), None)

    features = []
    for c in columns:
        sample = samples.get(c) or ColumnSample()
        present, ints, floats = sample.present, sample.ints, sample.floats
        if present and len(ints) >= _NUMERIC_SHARE * present and len(ints) == len(floats):
            dtype, kind = "int64", "numeric"
            default = round(sum(ints) / len(ints))
        elif present and len(floats) >= _NUMERIC_SHARE * present:
            dtype, kind = "float32", "numeric"
            default = float(sum(floats) / len(floats))
        else:
            dtype, default = "string", ""
            short = sample.short and sample.texts is not None
            kind = "categorical" if short else "text"
        name = safe_feature_name(c)
        features.append(
            Feature(
                name=name,
                dtype=dtype,
                kind=kind,
                default=default,
                source=c if name != c else None,
            )
        )
    label_name = None
    classes = None
    if label is not None:
        label_feature = next(f for f in features if (f.source or f.name) == label)
        label_name = label_feature.name
        label_feature.kind = "categorical" if label_feature.dtype != "float32" else "numeric"
        texts = (samples.get(label) or ColumnSample()).texts
        if label_feature.dtype in ("string", "int64") and texts is not None:
            classes = sorted(texts, key=_natural_key)
    return Schema(features, label=label_name, label_classes=classes, source_format=source_format)


def _natural_key(s: str) -> tuple[int, float | str]:
    try:
        return (0, float(s))
    except ValueError:
        return (1, s)


# ----------------------------------------------------------------------------- TF-facing helpers


def parse_spec(schema: Schema, include_label: bool = True, include_meta: bool = False) -> dict:
    """The ``tf.io.parse_example`` spec for ``schema`` (imports TensorFlow)."""
    import tensorflow as tf

    tf_dtype = {"int64": tf.int64, "float32": tf.float32, "string": tf.string}
    spec = {}
    for f in schema.features:
        if f.name == schema.label and not include_label:
            continue
        if f.kind == "meta" and not include_meta:
            continue
        if f.kind == "image_raw":
            # raw pixels are one bytes value; decoding and reshaping happens after parsing
            spec[f.name] = tf.io.FixedLenFeature([], tf.string)
            continue
        default = f.default
        if default is None:
            default = {"int64": 0, "float32": 0.0, "string": ""}[f.dtype]
        spec[f.name] = tf.io.FixedLenFeature(f.shape, tf_dtype[f.dtype], default_value=default)
    return spec


def diff_schemas(old: Schema, new: Schema) -> dict[str, list[str]]:
    """Breaking and compatible differences between two schemas.

    Returns:
        ``{"breaking": [...], "compatible": [...]}`` with one human-readable line per change.
        Breaking: a feature removed, its dtype, shape or kind changed, the label or its classes
        changed. Compatible: a feature added, a default changed.

    """
    breaking: list[str] = []
    compatible: list[str] = []
    old_f = {f.name: f for f in old.features}
    new_f = {f.name: f for f in new.features}
    for name in old_f.keys() - new_f.keys():
        breaking.append(f"feature {name!r} removed")
    for name in sorted(new_f.keys() - old_f.keys()):
        compatible.append(f"feature {name!r} added ({new_f[name].dtype})")
    for name in sorted(old_f.keys() & new_f.keys()):
        a, b = old_f[name], new_f[name]
        for attr in ("dtype", "shape", "kind"):
            if getattr(a, attr) != getattr(b, attr):
                breaking.append(
                    f"feature {name!r}: {attr} {getattr(a, attr)} -> {getattr(b, attr)}"
                )
        if a.default != b.default and a.dtype == b.dtype:
            compatible.append(f"feature {name!r}: default {a.default!r} -> {b.default!r}")
    if old.label != new.label:
        breaking.append(f"label {old.label!r} -> {new.label!r}")
    if (old.label_classes or []) != (new.label_classes or []):
        breaking.append(f"label classes {old.label_classes} -> {new.label_classes}")
    return {"breaking": sorted(breaking), "compatible": compatible}
