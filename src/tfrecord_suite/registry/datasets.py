"""A dataset registry that is just a folder or a ``gs://`` prefix.

Layout::

    <root>/<dataset>/<MAJOR.MINOR.PATCH>/manifest.json          the version exists iff this exists
    <root>/<dataset>/<MAJOR.MINOR.PATCH>/<attempt>/<shard files> written before the manifest
    <root>/<dataset>/<MAJOR.MINOR.PATCH>/dataset_info.json      for tfds.builder_from_directory
    <root>/<dataset>/aliases/<alias>.json                       pointers, compare-and-swap

Publishing copies the shards into a folder unique to the attempt, then creates the manifest with
create-if-absent. Two publishers racing for one version never touch each other's files; exactly
one manifest create succeeds; the loser either finds the same content (and returns that version)
or moves on to the next version. A crash before the manifest leaves only an orphaned attempt
folder, invisible to readers and removed by :meth:`Registry.gc`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import gzip
import hashlib
import io
import json
import logging
import os
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from typing import IO, Any

from tfrecord_suite import __version__
from tfrecord_suite.errors import UserError
from tfrecord_suite.io import naming, storage
from tfrecord_suite.registry.refs import (
    DatasetRef,
    InvalidName,
    Version,
    bump_rank,
    check_name,
)
from tfrecord_suite.schema import Schema, diff_schemas

_LOG = logging.getLogger(__name__)
MANIFEST = "manifest.json"
ALIASES = "aliases"
MANIFEST_FORMAT = 1
_PUBLISH_ATTEMPTS = 20


class RegistryError(UserError, RuntimeError):
    """A registry operation cannot proceed; the message says why."""


class BumpRefused(RegistryError):
    """The requested bump is lower than the changes require."""


class VerificationError(RegistryError):
    """A version's files do not match its manifest."""

    def __init__(self, problems: list[str], bad_shards: list[dict[str, Any]] | None = None):
        super().__init__("; ".join(problems))
        self.problems = problems
        self.bad_shards = bad_shards or []


# ----------------------------------------------------------------------------- reading shards


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


# ------------------------------------------------------------------------------------ registry


@dataclasses.dataclass
class PublishResult:
    """Outcome of :meth:`Registry.publish`."""

    version: str
    uri: str
    manifest: dict[str, Any]
    created: bool
    attempts: int


class Registry:
    """Versions, aliases and checks for the datasets under one root."""

    def __init__(self, root: str):
        self.root = storage.normalize(root)

    # -------------------------------------------------------------------------------- paths

    def dataset_dir(self, dataset: str) -> str:
        """Folder of a dataset."""
        return storage.join(self.root, check_name(dataset))

    def version_dir(self, dataset: str, version: str | Version) -> str:
        """Folder of one version."""
        return storage.join(self.dataset_dir(dataset), str(Version.parse(str(version))))

    def manifest_uri(self, dataset: str, version: str | Version) -> str:
        """URI of a version's manifest."""
        return storage.join(self.version_dir(dataset, version), MANIFEST)

    def alias_uri(self, dataset: str, alias: str) -> str:
        """URI of an alias pointer."""
        return storage.join(
            self.dataset_dir(dataset), ALIASES, f"{check_name(alias, 'alias')}.json"
        )

    # ------------------------------------------------------------------------------ reading

    def datasets(self) -> list[str]:
        """Names of datasets with at least one version folder."""
        return [d for d in storage.list_dirs(self.root) if _safe(d)]

    def versions(self, dataset: str) -> list[Version]:
        """Published versions (those with a manifest), oldest first."""
        out = []
        for name in storage.list_dirs(self.dataset_dir(dataset)):
            if Version.is_version(name) and storage.exists(self.manifest_uri(dataset, name)):
                out.append(Version.parse(name))
        return sorted(out)

    def latest(self, dataset: str) -> Version | None:
        """Newest published version, or None."""
        versions = self.versions(dataset)
        return versions[-1] if versions else None

    def manifest(self, dataset: str, version: str | Version) -> dict[str, Any]:
        """A version's manifest.

        Raises:
            RegistryError: The version does not exist (has no manifest).

        """
        uri = self.manifest_uri(dataset, version)
        try:
            return load_manifest(storage.read_text(uri), uri)
        except FileNotFoundError:
            raise RegistryError(f"{dataset}@{version} does not exist in {self.root}") from None

    def resolve(self, dataset: str, selector: str = "latest") -> Version:
        """A version for ``1.2.0``, ``1`` (newest 1.x.x), ``1.2`` (newest 1.2.x) or an alias.

        Raises:
            RegistryError: Nothing matches.

        """
        if Version.is_version(selector):
            v = Version.parse(selector)
            if not storage.exists(self.manifest_uri(dataset, v)):
                raise RegistryError(f"{dataset}@{selector} does not exist in {self.root}")
            return v
        parts = selector.split(".")
        if all(p.isdigit() for p in parts) and len(parts) <= 2:
            nums = [int(p) for p in parts]
            matches = [v for v in self.versions(dataset) if [v.major, v.minor][: len(nums)] == nums]
            if not matches:
                raise RegistryError(f"no version of {dataset} matches {selector}.x in {self.root}")
            return matches[-1]
        target = self.alias(dataset, selector)
        if target is None:
            if selector == "latest":
                latest = self.latest(dataset)
                if latest is not None:
                    return latest
                raise RegistryError(f"dataset {dataset!r} has no published versions in {self.root}")
            raise RegistryError(f"{dataset} has no alias {selector!r} in {self.root}")
        return target

    def resolve_ref(self, ref: str | DatasetRef) -> tuple[Registry, str, Version]:
        """Resolve ``<root>/<dataset>@<selector>`` to ``(registry, dataset, version)``."""
        if isinstance(ref, str):
            ref = DatasetRef.parse(ref)
        reg = Registry(ref.root) if storage.normalize(ref.root) != self.root else self
        return reg, ref.dataset, reg.resolve(ref.dataset, ref.selector)

    # -------------------------------------------------------------------------------- alias

    def alias(self, dataset: str, alias: str) -> Version | None:
        """The version an alias points to, or None if it does not exist."""
        data, _ = storage.read_with_token(self.alias_uri(dataset, alias))
        if data is None:
            return None
        return Version.parse(json.loads(data)["version"])

    def set_alias(
        self,
        dataset: str,
        alias: str,
        version: str | Version,
        expected: str | type[Ellipsis] | None = ...,
        only_forward: bool = False,
    ) -> Version:
        """Point ``alias`` at ``version`` with compare-and-swap.

        Args:
            dataset: Dataset name.
            alias: Alias name (``latest``, ``stable``...).
            version: Target version; must exist.
            expected: If given, the version the alias must point to now (None: must not exist);
                a mismatch raises. If omitted, the update retries on concurrent changes and only
                never loses a write.
            only_forward: Leave the alias alone if it already points to a newer version.

        Returns:
            The version the alias points to afterwards.

        Raises:
            storage.PreconditionFailed: ``expected`` was given and did not match.
            RegistryError: The target version does not exist.

        """
        target = Version.parse(str(version))
        if not storage.exists(self.manifest_uri(dataset, target)):
            raise RegistryError(f"cannot alias {dataset}@{target}: that version does not exist")
        uri = self.alias_uri(dataset, alias)
        for _ in range(100):
            data, token = storage.read_with_token(uri)
            current = None if data is None else json.loads(data)
            current_v = None if current is None else Version.parse(current["version"])
            if expected is not ...:
                want = None if expected is None else Version.parse(str(expected))
                if current_v != want:
                    raise storage.PreconditionFailed(
                        f"alias {alias!r} of {dataset} points to {current_v}, expected {want}"
                    )
            if only_forward and current_v is not None and current_v >= target:
                return current_v
            history = (current or {}).get("history", [])[-19:]
            if current_v is not None:
                history.append({"version": str(current_v), "until": _now()})
            body = {
                "alias": alias,
                "dataset": dataset,
                "version": str(target),
                "updated": _now(),
                "history": history,
            }
            try:
                storage.compare_and_swap(uri, json.dumps(body, indent=2).encode(), token)
                return target
            except storage.PreconditionFailed:
                if expected is not ...:
                    raise
                time.sleep(0.01)
        raise RegistryError(f"alias {alias!r} of {dataset}: too much contention, try again")

    def aliases(self, dataset: str) -> dict[str, str]:
        """Every alias of a dataset and its version."""
        out = {}
        for info in storage.list_files(storage.join(self.dataset_dir(dataset), ALIASES)):
            name = storage.basename(info.uri)
            if name.endswith(".json"):
                out[name[:-5]] = json.loads(storage.read_text(info.uri))["version"]
        return dict(sorted(out.items()))

    # ------------------------------------------------------------------------------ publish

    def publish(
        self,
        staged: str,
        dataset: str,
        bump: str = "auto",
        producer: dict[str, Any] | None = None,
        on_copied: Callable[[str], None] | None = None,
    ) -> PublishResult:
        """Publish the shards in ``staged`` (a shard step's output) as a new version.

        Args:
            staged: Folder holding ``summary.json``, ``schema.json`` and the shards.
            dataset: Dataset name.
            bump: ``auto``, ``major``, ``minor`` or ``patch``.
            producer: Extra producer fields (image, pipeline run id...).
            on_copied: Called with the attempt folder after the shards are copied and before the
                manifest is written (crash-injection hook for tests).

        Returns:
            The version, and whether it was created (False: identical content already published).

        Raises:
            BumpRefused: ``bump`` is lower than the changes require.
            RegistryError: The staged folder is incomplete or corrupt.

        """
        check_name(dataset)
        if bump not in ("auto", "major", "minor", "patch"):
            raise UserError(f"--bump {bump!r}: use auto, major, minor or patch")
        staged = storage.normalize(staged)
        body = self._describe_staged(staged)
        for attempt in range(1, _PUBLISH_ATTEMPTS + 1):
            existing = self._find_identical(dataset, body["content_digest"])
            if existing is not None:
                _LOG.info("%s@%s already holds this content; nothing published", dataset, existing)
                return PublishResult(
                    str(existing),
                    self.version_dir(dataset, existing),
                    self.manifest(dataset, existing),
                    False,
                    attempt,
                )
            parent = self.latest(dataset)
            parent_manifest = self.manifest(dataset, parent) if parent else None
            kind, reasons = required_bump(parent_manifest, body)
            if parent is not None and kind is None:
                # a racing publisher put this very content in place after the check above
                continue
            if bump != "auto":
                if kind is not None and bump_rank(bump) < bump_rank(kind):
                    raise BumpRefused(
                        f"--bump {bump} refused: the changes since {dataset}@{parent} need a "
                        f"{kind} bump ({'; '.join(reasons)})"
                    )
                kind = bump
                reasons = [*reasons, f"{bump} requested"]
            version = parent.bump(kind) if parent else Version(1, 0, 0)
            vdir = self.version_dir(dataset, version)
            attempt_dir = storage.join(vdir, f"data-{uuid.uuid4().hex[:12]}")
            shards = self._copy_shards(staged, body["shards"], attempt_dir, vdir)
            if on_copied is not None:
                on_copied(attempt_dir)
            manifest = self._manifest(
                dataset, version, parent, kind, reasons, body, shards, producer
            )
            text = json.dumps(manifest, indent=2, sort_keys=True)
            if storage.create_if_absent(storage.join(vdir, MANIFEST), text.encode()):
                # only the winner writes beside its manifest: a loser must not touch the folder
                self._write_tfds_metadata(vdir, attempt_dir, manifest)
                self.set_alias(dataset, "latest", version, only_forward=True)
                return PublishResult(str(version), vdir, manifest, True, attempt)
            _LOG.info("lost the race for %s@%s; retrying", dataset, version)
            storage.delete_tree(attempt_dir)
        raise RegistryError(f"could not publish {dataset} after {_PUBLISH_ATTEMPTS} attempts")

    def _describe_staged(self, staged: str) -> dict[str, Any]:
        try:
            summary = json.loads(storage.read_text(storage.join(staged, "summary.json")))
            schema = Schema.from_json(storage.read_text(storage.join(staged, "schema.json")))
        except FileNotFoundError:
            raise RegistryError(
                f"{staged} is not a complete shard output (no summary.json/schema.json); rerun "
                "the shard step"
            ) from None
        shards = []
        for s in summary["shards"]:
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
            "statistics": summary.get("statistics", {}),
            "input_fingerprint": summary.get("input_fingerprint", {}),
            "gzip": bool(summary.get("gzip")),
            "content_digest": content.hexdigest(),
        }

    def _find_identical(self, dataset: str, digest: str) -> Version | None:
        for v in reversed(self.versions(dataset)):
            if self.manifest(dataset, v).get("content_digest") == digest:
                return v
        return None

    def _copy_shards(
        self, staged: str, shards: list[dict[str, Any]], attempt_dir: str, vdir: str
    ) -> list[dict[str, Any]]:
        out = []
        for s in shards:
            dst = storage.join(attempt_dir, s["name"])
            storage.copy(storage.join(staged, s["name"]), dst)
            size = storage.stat(dst).size
            if size != s["bytes"]:
                raise RegistryError(
                    f"copy of {s['name']} to {dst} has {size} bytes, expected {s['bytes']}"
                )
            out.append(
                {
                    **s,
                    "path": storage.relative_to(dst, vdir)
                    if not storage.is_gcs(dst)
                    else dst[len(vdir) + 1 :],
                }
            )
        return out

    def _manifest(
        self,
        dataset: str,
        version: Version,
        parent: Version | None,
        kind: str | None,
        reasons: list[str],
        body: dict[str, Any],
        shards: list[dict[str, Any]],
        producer: dict[str, Any] | None,
    ) -> dict[str, Any]:
        return {
            "format": MANIFEST_FORMAT,
            "dataset": dataset,
            "version": str(version),
            "created": _now(),
            "parent": str(parent) if parent else None,
            "bump": kind or "initial",
            "bump_reasons": reasons,
            "schema": body["schema"],
            "splits": body["splits"],
            "shards": sorted(shards, key=lambda s: s["name"]),
            "totals": {
                "records": sum(s["records"] for s in shards),
                "bytes": sum(s["bytes"] for s in shards),
                "shards": len(shards),
            },
            "gzip": body["gzip"],
            "statistics": body["statistics"],
            "input_fingerprint": body["input_fingerprint"],
            "content_digest": body["content_digest"],
            "producer": {
                "package": f"tfrecord-suite {__version__}",
                "git_commit": _git_commit(),
                **(producer or {}),
            },
        }

    # ---------------------------------------------------------------------- TFDS metadata

    def _write_tfds_metadata(self, vdir: str, attempt_dir: str, manifest: dict[str, Any]) -> None:
        """Write ``dataset_info.json``/``features.json`` so TFDS can read the version."""
        from tfrecord_suite.registry import tfds_meta

        tfds_meta.write(vdir, attempt_dir[len(vdir) + 1 :], manifest)

    # ------------------------------------------------------------------------------- checks

    def verify(self, dataset: str, version: str | Version) -> dict[str, Any]:
        """Recompute every checksum and record count of a version.

        Raises:
            VerificationError: Listing every bad shard by name.

        """
        manifest = self.manifest(dataset, version)
        vdir = self.version_dir(dataset, version)
        problems, bad = [], []
        for s in manifest["shards"]:
            uri = storage.join(vdir, s["path"])
            n_before = len(problems)
            try:
                scan = scan_shard(uri, bool(naming.parse_shard_name(s["name"])["gzip"]))
            except FileNotFoundError:
                problems.append(f"{s['path']}: missing")
                bad.append(s)
                continue
            except RegistryError as exc:
                problems.append(f"{s['path']}: {exc}")
                bad.append(s)
                continue
            if scan.bytes != s["bytes"]:
                problems.append(f"{s['path']}: {scan.bytes} bytes, manifest says {s['bytes']}")
            if scan.sha256 != s["sha256"]:
                problems.append(
                    f"{s['path']}: sha256 {scan.sha256[:12]}... does not match manifest"
                )
            if scan.records != s["records"]:
                problems.append(
                    f"{s['path']}: {scan.records} records, manifest says {s['records']}"
                )
            if len(problems) > n_before:
                bad.append(s)
        if problems:
            raise VerificationError([f"{dataset}@{version}: {p}" for p in problems], bad)
        return {
            "dataset": dataset,
            "version": str(version),
            "shards": len(manifest["shards"]),
            "records": manifest["totals"]["records"],
            "ok": True,
        }

    def diff(self, dataset: str, a: str | Version, b: str | Version) -> dict[str, Any]:
        """Schema and per-split count changes from version ``a`` to ``b``."""
        ma, mb = self.manifest(dataset, a), self.manifest(dataset, b)
        kind, reasons = required_bump(ma, mb)
        splits = {}
        for name in sorted(set(ma["splits"]) | set(mb["splits"])):
            ra = ma["splits"].get(name, {}).get("records", 0)
            rb = mb["splits"].get(name, {}).get("records", 0)
            splits[name] = {"from": ra, "to": rb, "change": rb - ra}
        return {
            "dataset": dataset,
            "from": str(a),
            "to": str(b),
            "schema": diff_schemas(Schema.from_dict(ma["schema"]), Schema.from_dict(mb["schema"])),
            "splits": splits,
            "bump_needed": kind,
            "reasons": reasons,
        }

    def gc(self, dataset: str, grace_seconds: float = 3600.0, dry_run: bool = False) -> list[str]:
        """Remove staging files that no manifest references.

        Attempt folders of published versions that lost a race or crashed are removed at once;
        attempt folders of versions without a manifest only once they are older than
        ``grace_seconds`` (a publisher may still be copying).

        Returns:
            URIs removed (or that would be, with ``dry_run``).

        """
        removed = []
        now = time.time()
        for name in storage.list_dirs(self.dataset_dir(dataset)):
            if not Version.is_version(name):
                continue
            vdir = self.version_dir(dataset, name)
            manifest_uri = storage.join(vdir, MANIFEST)
            live: set[str] = set()
            published = storage.exists(manifest_uri)
            if published:
                live = {s["path"].split("/", 1)[0] for s in self.manifest(dataset, name)["shards"]}
            for sub in storage.list_dirs(vdir):
                if sub in live or not sub.startswith("data-"):
                    continue
                files = storage.list_files(storage.join(vdir, sub))
                newest = max((f.mtime for f in files), default=0.0)
                if not published and now - newest < grace_seconds:
                    continue
                removed.append(storage.join(vdir, sub))
                if not dry_run:
                    storage.delete_tree(storage.join(vdir, sub))
            if not published and not dry_run and not storage.list_files(vdir):
                storage.delete_tree(vdir)
        return removed


def required_bump(old: dict[str, Any] | None, new: dict[str, Any]) -> tuple[str | None, list[str]]:
    """The smallest bump from manifest ``old`` to the staged/published ``new`` and why.

    Returns:
        ``("major" | "minor" | "patch", reasons)``; ``(None, reasons)`` when there is no parent
        (``["first version"]``) or the content is identical.

    """
    if old is None:
        return None, ["first version"]
    diff = diff_schemas(Schema.from_dict(old["schema"]), Schema.from_dict(new["schema"]))
    if diff["breaking"]:
        return "major", diff["breaking"]
    reasons = list(diff["compatible"])
    records_changed = []
    for split in sorted(set(old["splits"]) | set(new["splits"])):
        a = old["splits"].get(split, {})
        b = new["splits"].get(split, {})
        if a.get("records_digest") != b.get("records_digest"):
            records_changed.append(
                f"split {split!r}: records changed ({a.get('records', 0)} -> {b.get('records', 0)})"
            )
    if reasons or records_changed:
        return "minor", reasons + records_changed
    if old.get("content_digest") == new.get("content_digest"):
        return None, ["identical content"]
    layout = []
    for split in sorted(new["splits"]):
        a = old["splits"].get(split, {}).get("shards")
        b = new["splits"][split]["shards"]
        if a != b:
            layout.append(f"split {split!r}: {a} -> {b} shards")
    if bool(old.get("gzip")) != bool(new.get("gzip")):
        layout.append(f"gzip {bool(old.get('gzip'))} -> {bool(new.get('gzip'))}")
    return "patch", layout or ["same records and schema, different serialization"]


def load_manifest(text: str, where: str = "manifest") -> dict[str, Any]:
    """Parse and sanity-check a manifest.

    Raises:
        RegistryError: Naming the manifest and the missing or malformed field.

    """
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RegistryError(f"{where}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise RegistryError(f"{where}: expected a JSON object")
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
            raise RegistryError(f"{where}: field {key!r} missing or not a {kind.__name__}")
    try:
        Version.parse(data["version"])
        check_name(data["dataset"])
        Schema.from_dict(data["schema"])
    except (InvalidName, ValueError) as exc:
        raise RegistryError(f"{where}: {exc}") from None
    for i, s in enumerate(data["shards"]):
        if not isinstance(s, dict) or not isinstance(s.get("path"), str):
            raise RegistryError(f"{where}: shards[{i}] needs a path")
        parts = s["path"].split("/")
        if s["path"].startswith("/") or ".." in parts or "" in parts:
            raise RegistryError(
                f"{where}: shards[{i}] path {s['path']!r} escapes the version folder"
            )
        for key in ("records", "bytes"):
            if not isinstance(s.get(key), int) or s[key] < 0:
                raise RegistryError(f"{where}: shards[{i}].{key} must be a non-negative integer")
        if not isinstance(s.get("sha256"), str):
            raise RegistryError(f"{where}: shards[{i}].sha256 missing")
    return data


def shard_uris(manifest: dict[str, Any], version_dir: str, split: str) -> list[str]:
    """Full URIs of one split's shards, in shard order."""
    shards = sorted(
        (s for s in manifest["shards"] if s["split"] == split), key=lambda s: s["index"]
    )
    if not shards:
        raise RegistryError(
            f"{manifest['dataset']}@{manifest['version']} has no split {split!r} "
            f"(splits: {sorted(manifest['splits'])})"
        )
    return [storage.join(version_dir, s["path"]) for s in shards]


def _safe(name: str) -> bool:
    try:
        check_name(name)
    except InvalidName:
        return False
    return True


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def _git_commit() -> str | None:
    commit = os.environ.get("GIT_COMMIT") or os.environ.get("GITHUB_SHA")
    if commit:
        return commit
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=False
        )
        if out.returncode == 0:
            return out.stdout.strip()
    return None


def iter_versions(reg: Registry, dataset: str) -> Iterator[dict[str, Any]]:
    """Manifests of every version, newest first."""
    for v in reversed(reg.versions(dataset)):
        yield reg.manifest(dataset, v)
