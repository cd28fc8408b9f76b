"""Transform: raw rows to serialized ``tf.train.Example`` records, split keys and statistics.

Pure Python plus TensorFlow's proto classes; no Beam, so it is unit-tested directly and reused by
the benchmark's plain-writer baseline.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import io
import json
import math
import operator
import re
import struct
from collections.abc import Mapping, Sequence
from typing import Any

from tfrecord_suite.errors import UserError
from tfrecord_suite.schema import DEFAULT_NA_VALUES, Feature, Schema, parse_scalar
from tfrecord_suite.shard.sources import RawRow


class RowError(UserError):
    """A row cannot become a record; ``field`` names the culprit when there is one."""

    def __init__(self, reason: str, field: str | None = None):
        super().__init__(reason)
        self.reason = reason
        self.field = field


@dataclasses.dataclass(frozen=True)
class SplitSpec:
    """Named splits with integer weights, e.g. ``train=80,validation=10,test=10``."""

    names: tuple[str, ...]
    weights: tuple[int, ...]

    @classmethod
    def parse(cls, text: str) -> SplitSpec:
        """Parse ``name=weight,...``.

        Raises:
            ValueError: On a malformed entry, a duplicate name or weights that are not positive.

        """
        names, weights = [], []
        for part in filter(None, (p.strip() for p in text.split(","))):
            name, sep, weight = part.partition("=")
            name = name.strip()
            if not sep or not name.isidentifier():
                raise UserError(f"split {part!r}: write name=weight, e.g. train=80")
            try:
                w = int(weight)
            except ValueError:
                raise UserError(f"split {part!r}: weight must be an integer") from None
            if w <= 0:
                raise UserError(f"split {part!r}: weight must be positive")
            if name in names:
                raise UserError(f"split {name!r} given twice")
            names.append(name)
            weights.append(w)
        if not names:
            raise UserError("at least one split is needed, e.g. train=80,validation=10,test=10")
        return cls(tuple(names), tuple(weights))

    def __str__(self) -> str:
        return ",".join(f"{n}={w}" for n, w in zip(self.names, self.weights, strict=True))

    def assign(self, digest: bytes) -> str:
        """The split for a 16-byte key digest (the first 8 bytes pick the split)."""
        point = int.from_bytes(digest[:8], "big") / 2**64 * sum(self.weights)
        acc = 0
        for name, weight in zip(self.names, self.weights, strict=True):
            acc += weight
            if point < acc:
                return name
        return self.names[-1]


def key_digest(key: bytes) -> bytes:
    """The 16-byte digest that places a record: bytes 0-7 choose the split, 8-15 the shard."""
    return hashlib.blake2b(key, digest_size=16).digest()


def shard_index(digest: bytes, num_shards: int) -> int:
    """The shard of a record within its split: a range of the hash's bytes 8-15.

    Ranges, not a remainder, so that finer ranges of the same hash (the disk-backed shuffle's
    buckets, :mod:`tfrecord_suite.shard.spill`) nest inside shards.
    """
    return (int.from_bytes(digest[8:16], "big") * num_shards) >> 64


#: Image aspect ratio handling when resizing at shard time (:class:`ImageOptions`).
ASPECTS = ("stretch", "crop")

_MAGIC = (
    (b"\xff\xd8\xff", "jpeg"),
    (b"\x89PNG\r\n\x1a\n", "png"),
    (b"GIF87a", "gif"),
    (b"GIF89a", "gif"),
    (b"BM", "bmp"),
)


def image_format(data: bytes) -> str:
    """``jpeg``, ``png``, ``gif``, ``bmp`` or ``other``, from the file's leading bytes."""
    for magic, name in _MAGIC:
        if data.startswith(magic):
            return name
    return "other"


@dataclasses.dataclass(frozen=True)
class ImageOptions:
    """How images are stored.

    Attributes:
        encoding: ``encoded`` keeps the PNG/JPEG bytes (small shards, decode while training);
            ``raw`` stores decoded uint8 pixels (larger shards, no decode cost while training).
        size: ``(height, width)`` to resize to; required for ``raw`` when sizes vary.
        channels: Force 1 (grayscale) or 3 (RGB) channels; None keeps the file's.
        aspect: How ``size`` treats the aspect ratio: ``stretch`` scales each side to its
            length (the ratio changes); ``crop`` scales to cover ``size`` keeping the ratio and
            keeps the central ``size`` window.
        quality: JPEG quality of re-encoded JPEG images.

    """

    encoding: str = "encoded"
    size: tuple[int, int] | None = None
    channels: int | None = None
    aspect: str = "stretch"
    quality: int = 90


@dataclasses.dataclass
class Converted:
    """One converted record."""

    split: str
    digest: bytes
    data: bytes
    label: str | None
    values: dict[str, Any]


class RowConverter:
    """Turns :class:`RawRow` objects into serialized examples according to a schema."""

    def __init__(
        self,
        schema: Schema,
        splits: SplitSpec,
        key_column: str | None = None,
        image: ImageOptions | None = None,
        na_values: Sequence[str] = DEFAULT_NA_VALUES,
    ):
        self.schema = schema
        self.splits = splits
        self.key_column = key_column
        self.image = image or ImageOptions()
        self.na_values = tuple(na_values)
        self._label_classes = {c: i for i, c in enumerate(schema.label_classes or [])}
        self._by_source = [(f, f.source or f.name) for f in schema.features]
        na = frozenset(self.na_values)
        self._cells = [(f, source, _cell_converter(f, na)) for f, source in self._by_source]
        self._label_is_float = bool(
            schema.label and schema.feature(schema.label).dtype == "float32"
        )
        if key_column is not None and key_column not in {s for _, s in self._by_source}:
            raise UserError(f"key column {key_column!r} is not a column of the input")

    # ------------------------------------------------------------------------------------ rows

    def convert(self, row: RawRow) -> Converted:
        """Convert one row.

        Raises:
            RowError: The row is malformed or a value does not fit its feature's type.

        """
        if row.error:
            raise RowError(row.error)
        if self.schema.source_format == "images":
            return self._convert_image(row)
        typed: dict[str, Any] = {}
        values = row.values
        for feature, source, cell in self._cells:
            if feature.kind == "meta" and source not in values:
                continue
            typed[feature.name] = cell(values.get(source))
        if self.schema.label is not None and typed.get(self.schema.label) is None:
            raise RowError("label is missing", field=self.schema.label)
        if self.key_column is not None:
            key = f"{self.key_column}={row.values.get(self.key_column)}".encode()
        else:
            key = json.dumps(
                [typed[f.name] for f, _ in self._by_source if f.name in typed], default=str
            ).encode()
        return self._finish(typed, key)

    def _finish(self, typed: dict[str, Any], key: bytes) -> Converted:
        digest = key_digest(key)
        try:
            data = self._serialize(typed)
        except UnicodeEncodeError as exc:  # JSON's "\ud800": text no UTF-8 can hold
            field = next(
                (k for k, v in typed.items() if isinstance(v, str) and not _encodes(v)), None
            )
            raise RowError(f"text holds a lone surrogate ({exc.reason})", field=field) from None
        label = typed.get(self.schema.label) if self.schema.label else None
        if label is not None and self.schema.source_format == "images":
            label = (self.schema.label_classes or [])[label]
        return Converted(
            split=self.splits.assign(digest),
            digest=digest,
            data=data,
            label=None if label is None or self._label_is_float else str(label),
            values=typed,
        )

    def _serialize(self, typed: Mapping[str, Any]) -> bytes:
        return encode_example(typed)

    # ---------------------------------------------------------------------------------- images

    def _convert_image(self, row: RawRow) -> Converted:
        from PIL import Image, UnidentifiedImageError

        data = row.values["image"]
        try:
            img = Image.open(io.BytesIO(data))
            img.load()
        except (UnidentifiedImageError, OSError, ValueError) as exc:
            raise RowError(f"not a decodable image: {exc}", field="image") from None
        label_name = row.values["label"]
        if label_name not in self._label_classes:
            raise RowError(f"class folder {label_name!r} is not a known class", field="label")
        channels = self.image.channels or (1 if img.mode in ("L", "1", "I", "F", "I;16") else 3)
        mode = "L" if channels == 1 else "RGB"
        changed = img.mode != mode
        img = img.convert(mode)
        if self.image.size is not None:
            resized = resize_image(img, self.image.size, self.image.aspect)
            changed = changed or resized is not img
            img = resized
        width, height = img.size
        if self.image.encoding == "raw":
            expected = self.schema.feature("image").shape
            if expected and list(expected) != [height, width, channels]:
                raise RowError(
                    f"image is {height}x{width}x{channels}, the dataset's raw shape is "
                    f"{expected}; pass --image-size to resize",
                    field="image",
                )
            payload = img.tobytes()
        elif image_format(data) == "jpeg" and (self.image.size or self.image.channels):
            # a photo stays a JPEG (a PNG of it is several times larger and slower to decode,
            # and the reader's JPEG paths apply); unchanged pixels keep their bytes, so no
            # generation is lost
            payload = data if not changed else _encoded(img, "JPEG", quality=self.image.quality)
        elif self.image.size is not None or self.image.channels is not None:
            payload = _encoded(img, "PNG")
        else:
            payload = data
        typed = {
            "image": payload,
            "image_height": height,
            "image_width": width,
            "image_channels": channels,
            "label": self._label_classes[label_name],
            "filename": row.file.rsplit("/", 1)[-1],
        }
        return self._finish(typed, data)


def _encodes(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def parse_size(text: str) -> tuple[int, int]:
    """``"HEIGHTxWIDTH"`` -> ``(height, width)``; a :class:`UserError` naming the text otherwise."""
    m = re.fullmatch(r"(\d+)[xX](\d+)", text.strip())
    if not m or int(m[1]) < 1 or int(m[2]) < 1:
        raise UserError(f"{text!r} is not HEIGHTxWIDTH, e.g. 224x224")
    return int(m[1]), int(m[2])


def resize_image(img: Any, size: tuple[int, int], aspect: str = "stretch") -> Any:
    """A PIL image at ``size`` (height, width); the same object when it already has that size.

    ``stretch`` scales each side to its length; ``crop`` keeps the aspect ratio, scaling to cover
    ``size``, and keeps the central window. Both filter with Pillow's bilinear kernel, which
    widens with the scale, so downscaling does not alias.
    """
    from PIL import Image, ImageOps

    height, width = size
    if img.size == (width, height):
        return img
    if aspect == "crop":
        return ImageOps.fit(img, (width, height), Image.Resampling.BILINEAR)
    return img.resize((width, height), Image.Resampling.BILINEAR)


def _encoded(img: Any, fmt: str, **params: Any) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format=fmt, **params)
    return buf.getvalue()


def _varint(n: int) -> bytes:
    """Protobuf's base-128 varint of a non-negative integer."""
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_SMALL_VARINTS = [_varint(i) for i in range(1 << 14)]
_PACK_FLOAT = struct.Struct("<f").pack
_ORDERS: dict[tuple[str, ...], list[str]] = {}
_KEYS: dict[str, bytes] = {}
_FLOAT_ENTRIES: dict[str, bytes] = {}


def _len(n: int) -> bytes:
    return _SMALL_VARINTS[n] if n < 16384 else _varint(n)


def map_key(name: str) -> bytes:
    """A feature map entry's key field: tag 1, the name's length, the name."""
    key = _KEYS.get(name)
    if key is None:
        raw = name.encode()
        key = _KEYS[name] = b"\x0a" + _len(len(raw)) + raw
    return key


def _float_entry(name: str) -> bytes:
    """Everything of a one-float feature's map entry before its 4 bytes (a fixed length)."""
    prefix = _FLOAT_ENTRIES.get(name)
    if prefix is None:
        # entry = key, value tag 2 (8 bytes: Feature.float_list tag 2, 6 bytes: packed tag 1, 4)
        body = map_key(name) + b"\x12\x08\x12\x06\x0a\x04"
        prefix = _FLOAT_ENTRIES[name] = b"\x0a" + _len(len(body) + 4) + body
    return prefix


def map_order(name: str) -> bytes:
    """The sort key of a feature's name in protobuf's deterministic order of map entries."""
    return name.encode() + b"\xff"  # 0xff never occurs in UTF-8


def encode_example(typed: Mapping[str, Any]) -> bytes:
    """A ``tf.train.Example`` of one value per feature, encoded directly.

    The same bytes as building the proto and ``SerializeToString(deterministic=True)`` (map
    entries in protobuf's order, packed floats and varints; a test checks it on generated rows),
    with the fixed parts of each feature's entry computed once per name. Missing (None) values
    are left out: the parse spec's default fills them in.
    """
    names = tuple(typed)
    order = _ORDERS.get(names)
    if order is None:
        # protobuf's deterministic order: by bytes, a name before its own prefixes ("ab" < "a")
        order = _ORDERS[names] = sorted(names, key=map_order)
    parts: list[bytes] = []
    floats = _FLOAT_ENTRIES
    for name in order:
        value = typed[name]
        if value is None:
            continue
        if isinstance(value, float):
            parts += (floats.get(name) or _float_entry(name), _PACK_FLOAT(value))
            continue
        if isinstance(value, str | bytes):
            data = value.encode() if isinstance(value, str) else value
            inner = b"\x0a" + _len(len(data)) + data
            feature = b"\x0a" + _len(len(inner)) + inner
        else:
            number = int(value)
            raw = _len(number) if 0 <= number < 16384 else _varint(number & 0xFFFFFFFFFFFFFFFF)
            inner = b"\x0a" + _len(len(raw)) + raw
            feature = b"\x1a" + _len(len(inner)) + inner
        body = map_key(name) + b"\x12" + _len(len(feature)) + feature
        parts += (b"\x0a", _len(len(body)), body)
    features = b"".join(parts)
    return b"\x0a" + _len(len(features)) + features if features else b""


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
FLOAT32_MAX = 3.4028234663852886e38


def _cell_converter(feature: Feature, na: frozenset[str]) -> Any:
    """One raw cell -> the feature's value (None when missing).

    The same as ``parse_scalar`` then ``_coerce``, with a fast path for the text cells of CSV
    files (most cells of most data): the same values, the same errors.
    """

    def general(value: Any) -> Any:
        value = parse_scalar(value, na)
        return None if value is None else _coerce(feature, value)

    numeric = {
        "float32": (float, -FLOAT32_MAX, FLOAT32_MAX, "a number"),
        "int64": (int, _INT64_MIN, _INT64_MAX, "an integer"),
    }
    if feature.dtype not in numeric:
        return general
    parse, low, high, what = numeric[feature.dtype]

    def to_number(value: Any) -> Any:
        if value.__class__ is not str:
            return general(value)
        value = value.strip()
        if value in na:
            return None
        try:
            number = parse(value)
        except ValueError:
            raise RowError(f"{value!r} is not {what}", field=feature.name) from None
        if low <= number <= high:
            return number
        return _coerce(feature, value)  # not finite, or out of range: its own message

    return to_number


def _coerce(feature: Feature, value: Any) -> Any:
    if feature.dtype == "int64":
        if isinstance(value, bool):
            return int(value)
        if isinstance(value, int):
            number = value
        elif isinstance(value, float) and value.is_integer():
            number = int(value)
        else:
            try:
                number = int(str(value))
            except ValueError:
                raise RowError(f"{value!r} is not an integer", field=feature.name) from None
        if not _INT64_MIN <= number <= _INT64_MAX:
            raise RowError(f"{value!r} does not fit in int64", field=feature.name)
        return number
    if feature.dtype == "float32":
        try:
            f = float(value)
        except (TypeError, ValueError, OverflowError):
            raise RowError(f"{value!r} is not a number", field=feature.name) from None
        if not math.isfinite(f):
            raise RowError(f"{value!r} is not a finite number", field=feature.name)
        if abs(f) > FLOAT32_MAX:
            raise RowError(f"{value!r} does not fit in float32", field=feature.name)
        return f
    if isinstance(value, bytes):
        return value
    if isinstance(value, dict | list):
        raise RowError("nested values are not supported; flatten the field", field=feature.name)
    return str(value)


def image_schema(
    classes: Sequence[str], image: ImageOptions, raw_shape: Sequence[int] | None = None
) -> Schema:
    """The fixed schema of an image-folder dataset."""
    from tfrecord_suite.schema import Feature

    kind = "image_raw" if image.encoding == "raw" else "image"
    return Schema(
        features=[
            Feature(
                "image", "string", list(raw_shape or []) if kind == "image_raw" else [], kind, ""
            ),
            Feature("image_height", "int64", [], "meta", 0),
            Feature("image_width", "int64", [], "meta", 0),
            Feature("image_channels", "int64", [], "meta", 0),
            Feature("label", "int64", [], "categorical", 0),
            Feature("filename", "string", [], "meta", ""),
        ],
        label="label",
        label_classes=list(classes),
        label_encoding="index",
        source_format="images",
    )


# ------------------------------------------------------------------------------------ statistics


def new_split_stats() -> dict[str, Any]:
    """An empty statistics accumulator for one split."""
    return {"count": 0, "bytes": 0, "label_histogram": {}, "features": {}}


def update_stats(stats: dict[str, Any], schema: Schema, rec: Converted) -> None:
    """Fold one record into a split's statistics."""
    update_stats_batch(stats, schema, [rec])


def update_stats_batch(stats: dict[str, Any], schema: Schema, recs: Sequence[Converted]) -> None:
    """Fold records of one split into its statistics, a column at a time (C-speed loops)."""
    if not recs:
        return
    stats["count"] += len(recs)
    stats["bytes"] += sum(len(r.data) for r in recs)
    hist = stats["label_histogram"]
    for label, n in collections.Counter(r.label for r in recs if r.label is not None).items():
        hist[label] = hist.get(label, 0) + n
    feats = stats["features"]
    for f in schema.features:
        if f.kind == "image":
            # the reader decodes JPEG-only datasets by cheaper paths (train/decode.py); only the
            # statistics can tell it that no record holds another format
            s = feats.setdefault(f.name, {"present": 0, "missing": 0, "formats": {}})
            found = collections.Counter(
                image_format(v) for v in (r.values.get(f.name) for r in recs) if v
            )
            s["present"] += sum(found.values())
            s["missing"] += len(recs) - sum(found.values())
            for name, n in found.items():
                s["formats"][name] = s["formats"].get(name, 0) + n
    tracked = [
        f for f in schema.features if f.kind not in ("image", "image_raw") and f.name != "filename"
    ]
    if not tracked:
        return
    names = [f.name for f in tracked]
    # transpose rows into columns with C-level loops; most columns have no missing value
    columns = zip(*[tuple(map(r.values.get, names)) for r in recs], strict=True)
    for f, column in zip(tracked, columns, strict=True):
        missing = column.count(None)
        if missing:
            column = tuple(v for v in column if v is not None)
        s = feats.get(f.name)
        if s is None:
            s = feats[f.name] = {"present": 0, "missing": 0}
        s["present"] += len(column)
        s["missing"] += missing
        if column and f.dtype in ("int64", "float32"):
            lo, hi = float(min(column)), float(max(column))
            if "min" not in s:
                s.update(min=lo, max=hi, sum=0.0, sum_sq=0.0)
            s["min"] = min(s["min"], lo)
            s["max"] = max(s["max"], hi)
            s["sum"] += float(sum(column))
            s["sum_sq"] += float(sum(map(operator.mul, column, column)))


def merge_stats(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Merge two split statistics accumulators (commutative and associative)."""
    out = {
        "count": a["count"] + b["count"],
        "bytes": a["bytes"] + b["bytes"],
        "label_histogram": dict(a["label_histogram"]),
        "features": {k: dict(v) for k, v in a["features"].items()},
    }
    for k, n in b["label_histogram"].items():
        out["label_histogram"][k] = out["label_histogram"].get(k, 0) + n
    for name, s in b["features"].items():
        t = out["features"].get(name)
        if t is None:
            out["features"][name] = dict(s)
            continue
        t["present"] += s["present"]
        t["missing"] += s["missing"]
        if "formats" in s:
            formats = dict(t.get("formats", {}))
            for name, n in s["formats"].items():
                formats[name] = formats.get(name, 0) + n
            t["formats"] = formats
        if "min" in s:
            if "min" not in t:
                t.update(min=s["min"], max=s["max"], sum=0.0, sum_sq=0.0)
            t["min"] = min(t["min"], s["min"])
            t["max"] = max(t["max"], s["max"])
            t["sum"] += s["sum"]
            t["sum_sq"] += s["sum_sq"]
    return out


def finalize_stats(stats: dict[str, Any]) -> dict[str, Any]:
    """Add means and standard deviations; sort the label histogram."""
    out = {
        "count": stats["count"],
        "bytes": stats["bytes"],
        "label_histogram": dict(sorted(stats["label_histogram"].items())),
        "features": {},
    }
    for name, s in sorted(stats["features"].items()):
        s = dict(s)
        if s.get("present") and "sum" in s:
            mean = s["sum"] / s["present"]
            s["mean"] = mean
            s["std"] = math.sqrt(max(0.0, s["sum_sq"] / s["present"] - mean * mean))
        s.pop("sum", None)
        s.pop("sum_sq", None)
        if "formats" in s:
            s["formats"] = dict(sorted(s["formats"].items()))
        out["features"][name] = s
    return out
