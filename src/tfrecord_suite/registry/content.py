"""A version's content, computed from shards: what a publish puts in a manifest.

A staged shard step's output scanned and described (:func:`describe_staged`, every shard read
once through :func:`scan_shard`: checksum, records, every record's CRC), the content of a fresh
version or of one appended to its parent (:func:`fresh_content`, :func:`appended`), the digest of
a version's records (:func:`records_digest`) and statistics merged (:func:`merge_statistics`).
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import json
from typing import IO, Any

from tfrecord_suite.io import naming, storage
from tfrecord_suite.registry import bumps
from tfrecord_suite.registry.manifest import Manifest, RegistryError
from tfrecord_suite.registry.refs import Version
from tfrecord_suite.schema import Schema, diff_schemas
from tfrecord_suite.shard.summary import ShardSummary


class _HashingReader(io.RawIOBase):
    """Wraps a binary stream and hashes every byte read through it."""

    def __init__(self, raw: IO[bytes]):
        self._raw = raw
        self.sha256 = hashlib.sha256()
        self.size = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._raw.read(len(buffer))
        n = len(data)
        buffer[:n] = data
        self.sha256.update(data)
        self.size += n
        return n


@dataclasses.dataclass
class ShardScan:
    """What one pass over a shard file finds."""

    sha256: str
    bytes: int
    records: int
    records_digest: int  # sum of per-record sha256 values mod 2**256: order-independent


def scan_shard(uri: str, compressed: bool) -> ShardScan:
    """Read a shard once: file checksum, record count (every record's CRC checked) and digest.

    Raises:
        RegistryError: The file is truncated or a CRC does not match; the message names it.

    """
    from tfrecord_suite.io import framing

    records, digest = 0, 0
    with storage.open_read(uri) as fh:
        hashing = _HashingReader(fh)
        buffered = io.BufferedReader(hashing, buffer_size=4 * 1024 * 1024)
        stream: IO[bytes] = gzip.GzipFile(fileobj=buffered) if compressed else buffered
        try:
            while (record := framing.read_record(stream)) is not None:
                records += 1
                digest = (digest + int.from_bytes(hashlib.sha256(record).digest(), "big")) % 2**256
        except (ValueError, OSError, EOFError) as exc:
            raise RegistryError(
                f"{uri}: corrupt TFRecord data after {records} records ({exc})"
            ) from None
        buffered.read()  # hash any trailing bytes too
    return ShardScan(hashing.sha256.hexdigest(), hashing.size, records, digest)


def describe_staged(staged: str) -> dict[str, Any]:
    """The staged shards of a shard step's output, each scanned, and their splits and digest.

    Raises:
        RegistryError: The folder is incomplete, a shard is not named as shards are, or a
            shard's records do not match the summary.

    """
    try:
        summary = ShardSummary.load(staged)
        schema = Schema.from_json(storage.read_text(storage.join(staged, "schema.json")))
    except FileNotFoundError:
        raise RegistryError(
            f"{staged} is not a complete shard output (no summary.json/schema.json); rerun "
            "the shard step"
        ) from None
    shards = []
    for s in summary.shards:
        name = storage.basename(s["path"])
        parsed = naming.parse_shard_name(name)
        if parsed is None:
            raise RegistryError(f"{s['path']}: not a shard name ({naming.SHARD_TEMPLATE})")
        scan = scan_shard(storage.join(staged, name), parsed["gzip"])
        if scan.records != s["records"]:
            raise RegistryError(
                f"{name}: holds {scan.records} records, the shard summary says {s['records']}"
            )
        shards.append(
            {
                "name": name,
                "split": parsed["split"],
                "index": parsed["index"],
                "num_shards": parsed["count"],
                "records": scan.records,
                "bytes": scan.bytes,
                "sha256": scan.sha256,
                "records_digest": scan.records_digest,
            }
        )
    splits: dict[str, dict[str, Any]] = {}
    for s in shards:
        sp = splits.setdefault(s["split"], {"records": 0, "bytes": 0, "shards": 0, "_d": 0})
        sp["records"] += s["records"]
        sp["bytes"] += s["bytes"]
        sp["shards"] += 1
        sp["_d"] = (sp["_d"] + s["records_digest"]) % 2**256
    for sp in splits.values():
        sp["records_digest"] = f"{sp.pop('_d'):064x}"
    for s in shards:
        s.pop("records_digest")
    schema_json = json.dumps(schema.to_dict(), sort_keys=True)
    content = hashlib.sha256(schema_json.encode())
    for s in sorted(shards, key=lambda s: s["name"]):
        content.update(f"{s['name']}:{s['sha256']}\n".encode())
    return {
        "schema": schema.to_dict(),
        "splits": dict(sorted(splits.items())),
        "shards": shards,
        "statistics": summary.statistics,
        "input_fingerprint": summary.input_fingerprint,
        "gzip": bool(summary.gzip),
        "content_digest": content.hexdigest(),
    }


def records_digest(content: dict[str, Any]) -> str:
    """Digest of a version's records by split, whatever shards hold them and in whatever order.

    An appended version and a version sharded from scratch from the same records get the same
    value (each split's digest is a sum of per-record hashes).
    """
    schema = _without_defaults(content["schema"])  # computed from the data, not part of it
    digest = hashlib.sha256(json.dumps(schema, sort_keys=True).encode())
    for name, split in sorted(content["splits"].items()):
        digest.update(f"{name}:{split['records_digest']}\n".encode())
    return digest.hexdigest()


def fresh_content(body: dict[str, Any], batch: str) -> dict[str, Any]:
    """A new version's content: the staged shards, all new, in ``batch``."""
    shards = [{**s, "path": f"{batch}/{s['name']}"} for s in body["shards"]]
    added = sum(s["bytes"] for s in shards)
    return {**body, "shards": shards, "storage": {"added_bytes": added, "shared_bytes": 0}}


def appended(
    dataset: str,
    parent: Version | None,
    parent_manifest: Manifest | None,
    body: dict[str, Any],
    batch: str,
) -> tuple[str, list[str], dict[str, Any]]:
    """The bump, reasons and content of ``parent`` plus the staged shards in ``batch``."""
    if parent is None or parent_manifest is None:
        raise RegistryError(f"cannot append to {dataset}: it has no version yet; publish one first")
    if _without_defaults(parent_manifest.schema) != _without_defaults(body["schema"]):
        diff = diff_schemas(
            Schema.from_dict(parent_manifest.schema), Schema.from_dict(body["schema"])
        )
        raise RegistryError(
            f"cannot append to {dataset}@{parent}: the staged schema differs "
            f"({'; '.join(diff['breaking'] + diff['compatible']) or 'labels or encoding'}); "
            "publish it as a new version instead"
        )
    if parent_manifest.gzip != body["gzip"]:
        raise RegistryError(
            f"cannot append to {dataset}@{parent}: its shards are "
            f"{'' if parent_manifest.gzip else 'not '}GZIP-compressed and the staged ones "
            f"{'are' if body['gzip'] else 'are not'}"
        )
    in_version = not parent_manifest.shards_in_batches  # format 1: paths inside the version
    old = [
        {**s, "path": f"{parent}/{s['path']}" if in_version else s["path"]}
        for s in parent_manifest.shards
    ]
    new = [{**s, "path": f"{batch}/{s['name']}"} for s in body["shards"]]
    shards = []
    for split in sorted({s["split"] for s in old + new}):
        mine = sorted((s for s in old if s["split"] == split), key=lambda s: s["index"])
        mine += sorted((s for s in new if s["split"] == split), key=lambda s: s["index"])
        shards += [{**s, "index": i, "num_shards": len(mine)} for i, s in enumerate(mine)]
    splits = {}
    for name in sorted(set(parent_manifest.splits) | set(body["splits"])):
        none = {"records": 0, "bytes": 0, "shards": 0, "records_digest": "0"}
        a, b = parent_manifest.splits.get(name, none), body["splits"].get(name, none)
        digest = (int(a["records_digest"], 16) + int(b["records_digest"], 16)) % 2**256
        splits[name] = {
            "records": a["records"] + b["records"],
            "bytes": a["bytes"] + b["bytes"],
            "shards": a["shards"] + b["shards"],
            "records_digest": f"{digest:064x}",
        }
    content_digest = hashlib.sha256(json.dumps(parent_manifest.schema, sort_keys=True).encode())
    for s in sorted(shards, key=lambda s: s["path"]):
        content_digest.update(f"{s['path']}:{s['sha256']}\n".encode())
    added = sum(s["bytes"] for s in new)
    reasons = [
        f"appended {sum(s['records'] for s in new)} records in {len(new)} shards to {parent}"
    ]
    content = {
        # the parent's: its imputation defaults, which the staged data's may differ from
        "schema": parent_manifest.schema,
        "splits": splits,
        "shards": shards,
        "statistics": merge_statistics(parent_manifest.statistics, body["statistics"]),
        "input_fingerprint": body["input_fingerprint"],
        "gzip": body["gzip"],
        "content_digest": content_digest.hexdigest(),
        "storage": {"added_bytes": added, "shared_bytes": sum(s["bytes"] for s in old)},
        "append": {
            "parent": str(parent),
            "parent_content_digest": parent_manifest.content_digest,
            "added_digest": body["content_digest"],
            "added_records": sum(s["records"] for s in new),
            "added_shards": len(new),
            "batch": batch,
        },
    }
    return bumps.APPEND, reasons, content


def _without_defaults(schema: dict[str, Any]) -> dict[str, Any]:
    """A schema without its features' defaults, which are computed from the data."""
    return {**schema, "features": [{**f, "default": None} for f in schema["features"]]}


def merge_statistics(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Per-split statistics of two sets of records merged, as if computed over both at once."""
    from tfrecord_suite.shard import convert

    def unfinalize(s: dict[str, Any]) -> dict[str, Any]:
        out = {**s, "features": {}}
        for name, f in s.get("features", {}).items():
            f = dict(f)
            if "mean" in f:
                mean, std, n = f.pop("mean"), f.pop("std"), f["present"]
                f["sum"], f["sum_sq"] = mean * n, (std * std + mean * mean) * n
            out["features"][name] = f
        return out

    merged = {}
    for split in sorted(set(a) | set(b)):
        if split in a and split in b:
            merged[split] = convert.finalize_stats(
                convert.merge_stats(unfinalize(a[split]), unfinalize(b[split]))
            )
        else:
            merged[split] = a.get(split) or b[split]
    return merged
