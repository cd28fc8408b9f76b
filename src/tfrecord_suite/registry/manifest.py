"""A dataset version's manifest, typed: ``<dataset>/<MAJOR.MINOR.PATCH>/manifest.json``.

One class reads and writes every generation of the file: format 2 (shards in batches under
``_data/``, paths relative to the dataset folder) and the format before it (no ``format`` key,
shards inside the version, paths relative to the version folder). Keys a manifest of an older
generation does not have stay absent when it is written back, and keys this code does not know
are kept, so a manifest read and written again is the same JSON object.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from tfrecord_suite.errors import UserError
from tfrecord_suite.registry.refs import InvalidName, Version, check_name
from tfrecord_suite.schema import Schema

#: The manifest format this code writes: 2, shards in batches under ``_data/``.
MANIFEST_FORMAT = 2
#: Keys an older manifest may lack: absent, they are None here and left out when written.
_OPTIONAL = ("format", "records_digest", "storage", "append")


class RegistryError(UserError, RuntimeError):
    """A dataset registry operation failed; the message says why.

    Defined here, in the registry's lowest layer, so that the manifest's errors are registry
    errors too.
    """


class ManifestError(RegistryError):
    """A manifest is not valid JSON or misses a field; the message names the file and field."""


@dataclasses.dataclass
class Manifest:
    """Everything a published dataset version is.

    Attributes:
        dataset: The dataset's name.
        version: ``MAJOR.MINOR.PATCH``.
        schema: The schema (:class:`tfrecord_suite.schema.Schema` as a dict).
        splits: Split name -> ``{"records", "shards", ...}``.
        shards: One dict per shard file: ``split``, ``index``, ``path``, ``records``,
            ``bytes``, ``sha256``.
        totals: ``records``, ``bytes`` and ``shards`` over all splits.
        content_digest: sha256 over the schema and every shard's digest: the content's identity.
        format: 2 for shards in batches (paths relative to the dataset folder); None in a
            manifest written before formats were numbered (paths relative to the version).
        created: ISO time of publishing.
        parent: The version this one was bumped from, if any.
        bump: ``initial``, ``major``, ``minor`` or ``patch``.
        bump_reasons: Why that bump.
        gzip: Whether the shards are GZIP-compressed.
        statistics: Per-split feature statistics.
        input_fingerprint: The raw input's files and digest.
        records_digest: The records' identity, equal for an appended version and one sharded
            from scratch from the same rows.
        storage: ``added_bytes`` and ``shared_bytes``: what the version cost.
        append: For an appended version: its parent and what it added.
        producer: The package version, git commit and pipeline run that published it.
        extra: Keys this code does not know, kept as they were.

    """

    dataset: str
    version: str
    schema: dict[str, Any]
    splits: dict[str, dict[str, Any]]
    shards: list[dict[str, Any]]
    totals: dict[str, Any]
    content_digest: str
    format: int | None = MANIFEST_FORMAT
    created: str = ""
    parent: str | None = None
    bump: str = "initial"
    bump_reasons: list[str] = dataclasses.field(default_factory=list)
    gzip: bool = False
    statistics: dict[str, Any] = dataclasses.field(default_factory=dict)
    input_fingerprint: dict[str, Any] = dataclasses.field(default_factory=dict)
    records_digest: str | None = None
    storage: dict[str, Any] | None = None
    append: dict[str, Any] | None = None
    producer: dict[str, Any] = dataclasses.field(default_factory=dict)
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def ref(self) -> str:
        """``dataset@version``."""
        return f"{self.dataset}@{self.version}"

    @property
    def compression(self) -> str:
        """The shards' compression as ``tf.data`` names it: ``GZIP`` or ``""``."""
        return "GZIP" if self.gzip else ""

    @property
    def shards_in_batches(self) -> bool:
        """Whether shard paths are relative to the dataset folder (format 2) or the version."""
        return (self.format or 1) >= 2

    def split_records(self, split: str) -> int:
        """Records of one split (0 if the version has no such split)."""
        return int(self.splits.get(split, {}).get("records", 0))

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of ``manifest.json``."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        for key in _OPTIONAL:
            if out[key] is None:
                del out[key]
        return {**self.extra, **out}

    def to_json(self) -> str:
        """``manifest.json``'s text (sorted keys, as every manifest is written)."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: Any, where: str = "manifest") -> Manifest:
        """A manifest from its JSON object, checked.

        Raises:
            ManifestError: Naming ``where`` and the missing or malformed field.

        """
        if not isinstance(data, dict):
            raise ManifestError(f"{where}: expected a JSON object")
        for key, kind in (
            ("dataset", str),
            ("version", str),
            ("shards", list),
            ("splits", dict),
            ("schema", dict),
            ("content_digest", str),
            ("totals", dict),
        ):
            if not isinstance(data.get(key), kind):
                raise ManifestError(f"{where}: field {key!r} missing or not a {kind.__name__}")
        try:
            Version.parse(data["version"])
            check_name(data["dataset"])
            Schema.from_dict(data["schema"])
        except (InvalidName, ValueError) as exc:
            raise ManifestError(f"{where}: {exc}") from None
        for i, s in enumerate(data["shards"]):
            _check_shard(s, f"{where}: shards[{i}]")
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        known = {k: v for k, v in data.items() if k in names}
        known.update({k: None for k in _OPTIONAL if k not in data})
        return cls(**known, extra={k: v for k, v in data.items() if k not in names})

    @classmethod
    def load(cls, text: str, where: str = "manifest") -> Manifest:
        """Parse and check ``manifest.json``'s text.

        Raises:
            ManifestError: Naming ``where`` and what is wrong.

        """
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ManifestError(f"{where}: not valid JSON ({exc})") from None
        return cls.from_dict(data, where)


def _check_shard(shard: Any, where: str) -> None:
    if not isinstance(shard, dict) or not isinstance(shard.get("path"), str):
        raise ManifestError(f"{where} needs a path")
    parts = shard["path"].split("/")
    if shard["path"].startswith("/") or ".." in parts or "" in parts:
        raise ManifestError(f"{where} path {shard['path']!r} escapes the version folder")
    for key in ("records", "bytes"):
        if not isinstance(shard.get(key), int) or shard[key] < 0:
            raise ManifestError(f"{where}.{key} must be a non-negative integer")
    if not isinstance(shard.get("sha256"), str):
        raise ManifestError(f"{where}.sha256 missing")
