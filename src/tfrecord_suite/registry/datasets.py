"""A dataset registry that is just a folder or a ``gs://`` or ``s3://`` prefix.

Layout::

    <root>/<dataset>/<MAJOR.MINOR.PATCH>/manifest.json   the version exists iff this exists
    <root>/<dataset>/<MAJOR.MINOR.PATCH>/removed.json    left by ``gc``: the number is never reused
    <root>/<dataset>/<MAJOR.MINOR.PATCH>/dataset_info.json, features.json, tfds/   for TFDS
    <root>/<dataset>/_data/<batch>/<shard files>         shards, in batches; manifests point here
    <root>/<dataset>/aliases/<alias>.json                pointers, compare-and-swap

Shards live in batches under ``_data/``, not inside a version: a version is its manifest, which
lists every shard with its own path (relative to the dataset's folder) and checksum. So
publishing costs only what changed. A shard step that wrote straight into ``_data/`` (as the
pipeline does) is published in place: the manifest is the only new object. Shards staged
elsewhere are hard-linked into a new batch where the store allows it (one file, two names) and
copied otherwise; :func:`tfrecord_suite.io.storage.bytes_copied` counts what was copied. An
*appended* version lists its parent's shards as they are plus the new batch.

Versions are claimed by creating the manifest with create-if-absent
(:mod:`tfrecord_suite.registry.store`): exactly one racing publisher gets each number, and a
crash before the manifest leaves only a batch no manifest references, which :meth:`Registry.gc`
removes once it is older than the grace period. Manifests written before batches existed
(``format`` 1) keep their shards inside the version folder and read as before.

This module holds :class:`Registry` (paths, reading, aliases, publishing, checks, ``gc``); what a
new version's manifest holds is computed in :mod:`tfrecord_suite.registry.content`, and whether
its number is a major, minor or patch bump is decided in :mod:`tfrecord_suite.registry.bumps`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import logging
import os
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from tfrecord_suite import __version__
from tfrecord_suite.errors import UserError
from tfrecord_suite.io import naming, storage
from tfrecord_suite.registry import bumps, store
from tfrecord_suite.registry.content import (
    appended,
    describe_staged,
    fresh_content,
    records_digest,
    scan_shard,
)
from tfrecord_suite.registry.manifest import MANIFEST_FORMAT, Manifest, RegistryError
from tfrecord_suite.registry.refs import (
    DatasetRef,
    InvalidName,
    Version,
    check_name,
)
from tfrecord_suite.schema import Schema, diff_schemas

_LOG = logging.getLogger(__name__)
MANIFEST = "manifest.json"
REMOVED = "removed.json"
ALIASES = "aliases"
DATA = "_data"
#: The alias a dataset's first version gets; after that only an explicit move changes it.
STABLE = "stable"

_PUBLISH_ATTEMPTS = 20
#: How long data no manifest references is kept before ``gc`` removes it, and so how long a
#: publish may take from reading its inputs to creating its manifest. A batch staged in place
#: is only published in place while it is younger than half of this.
DATA_GRACE_SECONDS = 7 * 24 * 3600.0


class VerificationError(RegistryError):
    """A version's files do not match its manifest."""

    def __init__(self, problems: list[str], bad_shards: list[dict[str, Any]] | None = None):
        super().__init__("; ".join(problems))
        self.problems = problems
        self.bad_shards = bad_shards or []


# ------------------------------------------------------------------------------------ registry


@dataclasses.dataclass
class PublishResult:
    """Outcome of :meth:`Registry.publish`."""

    version: str
    uri: str
    manifest: Manifest
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

    def manifest(self, dataset: str, version: str | Version) -> Manifest:
        """A version's manifest.

        Raises:
            RegistryError: The version does not exist (has no manifest).

        """
        uri = self.manifest_uri(dataset, version)
        try:
            return Manifest.load(storage.read_text(uri), uri)
        except FileNotFoundError:
            raise RegistryError(f"{dataset}@{version} does not exist in {self.root}") from None

    def _published(
        self, dataset: str, newest_first: bool = False
    ) -> Iterator[tuple[Version, Manifest]]:
        """Each published version with its manifest, skipping one removed since the listing.

        ``gc`` may remove a version between ``versions`` listing it and its manifest being
        read (its manifest is gone then, ``removed.json`` in its place); such a version holds
        nothing any more, so callers that walk versions skip it instead of failing.
        """
        listed = self.versions(dataset)
        for v in reversed(listed) if newest_first else listed:
            try:
                yield v, self.manifest(dataset, v)
            except RegistryError:
                continue

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

    @classmethod
    def resolve_ref(cls, ref: str | DatasetRef) -> tuple[Registry, str, Version]:
        """Resolve ``<root>/<dataset>@<selector>`` to ``(registry, dataset, version)``.

        The reference names its registry, so no registry is needed to call this.
        """
        if isinstance(ref, str):
            ref = DatasetRef.parse(ref)
        reg = cls(ref.root)
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
        return store.move_alias(
            self.alias_uri(dataset, alias),
            target,
            {"alias": alias, "dataset": dataset},
            decode=Version.parse,
            encode=str,
            expected=expected
            if expected is store.ANY or expected is None
            else Version.parse(str(expected)),
            only_forward=only_forward,
            what=f"alias {alias!r} of {dataset}",
            error=RegistryError,
        )

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
        append: bool = False,
    ) -> PublishResult:
        """Publish the shards in ``staged`` (a shard step's output) as a new version.

        Args:
            staged: Folder holding ``summary.json``, ``schema.json`` and the shards.
            dataset: Dataset name.
            bump: ``auto``, ``major``, ``minor`` or ``patch`` (an append is always a minor bump).
            producer: Extra producer fields (image, pipeline run id...).
            on_copied: Called with the batch folder once the shards are in place and before the
                manifest is written (crash-injection hook for tests).
            append: Make a MINOR version of the latest version's shards (referenced, not
                copied) plus these. The staged shards must have the same schema and compression
                and be split by the same rule (the shard step's hash of each record's key).

        Returns:
            The version, and whether it was created (False: this content, or this appended
            data, is already published).

        Raises:
            bumps.BumpRefused: ``bump`` is lower than the changes require.
            RegistryError: The staged folder is incomplete or corrupt, or cannot be appended.

        """
        check_name(dataset)
        bumps.check_request(bump)
        staged = storage.normalize(staged)
        body = describe_staged(staged)
        earlier = self._already_published(dataset, body, append)
        if earlier is not None:
            return earlier
        batch = self._place_shards(dataset, staged, body["shards"])
        if on_copied is not None:
            on_copied(storage.join(self.dataset_dir(dataset), batch))
        attempts = 0
        proposed: dict[Version, Manifest] = {}  # the store writes each as a dict

        def propose(attempt: int) -> store.Proposal[Version] | PublishResult | object:
            nonlocal attempts
            attempts = attempt
            earlier = self._already_published(dataset, body, append, attempt)
            if earlier is not None:
                return earlier
            parent = self.latest(dataset)
            parent_manifest = self.manifest(dataset, parent) if parent else None
            if append:
                kind, reasons, content = appended(dataset, parent, parent_manifest, body, batch)
            else:
                kind, reasons = bumps.bump_for(dataset, parent, parent_manifest, body, bump)
                if parent is not None and kind is None:
                    # a racing publisher put this very content in place after the check above
                    return store.RETRY
                content = fresh_content(body, batch)
            version = parent.bump(kind) if parent else Version(1, 0, 0)
            while storage.exists(storage.join(self.version_dir(dataset, version), REMOVED)):
                version = version.bump("patch")  # gc removed this number: never reuse it
            manifest = self._manifest(dataset, version, parent, kind, reasons, content, producer)
            proposed[version] = manifest
            return store.Proposal(version, self.manifest_uri(dataset, version), manifest.to_dict())

        won = store.publish_next(propose, _PUBLISH_ATTEMPTS, dataset, RegistryError)
        if isinstance(won, PublishResult):
            batch_uri = storage.join(self.dataset_dir(dataset), batch)
            if batch_uri != staged:  # our own links or copies, which no manifest references
                storage.delete_tree(batch_uri)
            if won.manifest.parent is None:  # a first publish that stopped before its alias
                self._first_stable(dataset, won.version)
            return won
        vdir = self.version_dir(dataset, won.version)
        manifest = proposed[won.version]
        # only the winner writes beside its manifest: a loser must not touch the folder
        self._write_tfds_metadata(vdir, manifest)
        self.set_alias(dataset, "latest", won.version, only_forward=True)
        if manifest.parent is None:
            self._first_stable(dataset, won.version)
        return PublishResult(str(won.version), vdir, manifest, True, attempts)

    def _first_stable(self, dataset: str, version: str | Version) -> None:
        """Point ``stable`` at ``version``, the dataset's first, if it has no ``stable`` yet.

        A dataset's first version is its stable one; after that only an explicit move
        (``tfrecord-suite version alias REF stable``) changes what ``@stable`` trains on, so a
        new version never reaches the pipelines that follow ``stable`` unreviewed. Create-if-
        absent: of two racing first publishers, one sets it and the other leaves it.
        """
        if self.alias(dataset, STABLE) is not None:
            return
        # another publisher may have made the first version stable meanwhile
        with contextlib.suppress(storage.PreconditionFailed):
            self.set_alias(dataset, STABLE, version, expected=None)

    def _already_published(
        self, dataset: str, body: dict[str, Any], append: bool, attempt: int = 1
    ) -> PublishResult | None:
        """The version that already holds this content (or, appending, this appended data)."""
        for v, m in self._published(dataset, newest_first=True):
            same = (
                (m.append or {}).get("added_digest") == body["content_digest"]
                if append
                else m.content_digest == body["content_digest"]
            )
            if same:
                _LOG.info("%s@%s already holds this content; nothing published", dataset, v)
                return PublishResult(str(v), self.version_dir(dataset, v), m, False, attempt)
        return None

    def _place_shards(self, dataset: str, staged: str, shards: list[dict[str, Any]]) -> str:
        """Put the staged shards in a batch; return the batch's path in the dataset's folder.

        In place when ``staged`` already is a batch of this dataset (and young enough that
        ``gc`` cannot remove it before the manifest exists); otherwise linked or copied into a
        new batch.
        """
        ddir = self.dataset_dir(dataset)
        pool = storage.join(ddir, DATA)
        if staged.startswith(pool + "/"):
            files = [storage.stat(storage.join(staged, s["name"])) for s in shards]
            oldest = min((f.mtime for f in files), default=time.time())
            if time.time() - oldest < DATA_GRACE_SECONDS / 2:
                return _relative(staged, ddir)
            _LOG.info("%s is too old to publish in place; linking it into a new batch", staged)
        batch = storage.join(pool, _new_batch_name())
        for s in shards:
            dst = storage.join(batch, s["name"])
            storage.link_or_copy(storage.join(staged, s["name"]), dst)
            size = storage.stat(dst).size
            if size != s["bytes"]:
                raise RegistryError(f"{dst} has {size} bytes, expected {s['bytes']}")
        return _relative(batch, ddir)

    def _manifest(
        self,
        dataset: str,
        version: Version,
        parent: Version | None,
        kind: str | None,
        reasons: list[str],
        content: dict[str, Any],
        producer: dict[str, Any] | None,
    ) -> Manifest:
        shards = content["shards"]
        return Manifest(
            format=MANIFEST_FORMAT,
            dataset=dataset,
            version=str(version),
            created=store.now(),
            parent=str(parent) if parent else None,
            bump=kind or "initial",
            bump_reasons=reasons,
            schema=content["schema"],
            splits=content["splits"],
            shards=sorted(shards, key=lambda s: (s["split"], s["index"])),
            totals={
                "records": sum(s["records"] for s in shards),
                "bytes": sum(s["bytes"] for s in shards),
                "shards": len(shards),
            },
            gzip=content["gzip"],
            statistics=content["statistics"],
            input_fingerprint=content["input_fingerprint"],
            content_digest=content["content_digest"],
            records_digest=records_digest(content),
            storage=content["storage"],
            append=content.get("append"),
            producer={
                "package": f"tfrecord-suite {__version__}",
                "git_commit": _git_commit(),
                **(producer or {}),
            },
        )

    # ---------------------------------------------------------------------- TFDS metadata

    def _write_tfds_metadata(self, vdir: str, manifest: Manifest) -> None:
        """Write ``dataset_info.json``/``features.json`` so TFDS can read the version."""
        from tfrecord_suite.registry import tfds_meta

        tfds_meta.write(vdir, manifest, [shard_uri(manifest, vdir, s) for s in manifest.shards])

    # ------------------------------------------------------------------------------- checks

    def verify(self, dataset: str, version: str | Version) -> dict[str, Any]:
        """Recompute every checksum and record count of a version.

        Raises:
            VerificationError: Listing every bad shard by name.

        """
        manifest = self.manifest(dataset, version)
        vdir = self.version_dir(dataset, version)
        problems, bad = [], []
        for s in manifest.shards:
            uri = shard_uri(manifest, vdir, s)
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
            "shards": len(manifest.shards),
            "records": manifest.totals["records"],
            "ok": True,
        }

    def diff(self, dataset: str, a: str | Version, b: str | Version) -> dict[str, Any]:
        """Schema and per-split count changes from version ``a`` to ``b``."""
        ma, mb = self.manifest(dataset, a), self.manifest(dataset, b)
        kind, reasons = bumps.required_bump(ma, mb)
        splits = {}
        for name in sorted(set(ma.splits) | set(mb.splits)):
            ra, rb = ma.split_records(name), mb.split_records(name)
            splits[name] = {"from": ra, "to": rb, "change": rb - ra}
        return {
            "dataset": dataset,
            "from": str(a),
            "to": str(b),
            "schema": diff_schemas(Schema.from_dict(ma.schema), Schema.from_dict(mb.schema)),
            "splits": splits,
            "bump_needed": kind,
            "reasons": reasons,
        }

    def gc(
        self,
        dataset: str,
        keep_last: int | None = None,
        keep_newer_than: float | None = None,
        grace_seconds: float = DATA_GRACE_SECONDS,
        dry_run: bool = False,
    ) -> GcReport:
        """Remove old versions, then the data no manifest references.

        Args:
            dataset: Dataset name.
            keep_last: Keep this many newest versions (None: remove no version by count).
            keep_newer_than: Keep versions created less than this many seconds ago.
            grace_seconds: Data is removed only once nothing has referenced it for this long
                (unpublished batches by their files' age and the start in their name, removed
                versions' data by the time of removal), so a publish still running is never
                robbed of its shards.
            dry_run: Only report.

        A version an alias points to is always kept. A removed version leaves ``removed.json``
        (with its manifest) in place of its manifest, so its number is never published again.
        Shards a kept version references (an appended version's parent shards) stay.

        """
        if keep_last is not None and keep_last < 1:
            raise UserError("--keep-last must be at least 1")
        now = time.time()
        report = GcReport(dry_run=dry_run)
        if keep_last is not None or keep_newer_than is not None:
            manifests = dict(self._published(dataset))  # another gc may be removing some
            live = list(manifests)
            keep = {Version.parse(v) for v in self.aliases(dataset).values()}
            if keep_last is not None:
                keep |= set(live[-keep_last:])
            if keep_newer_than is not None:
                keep |= {v for v in live if now - _age_base(manifests[v]) < keep_newer_than}
            for v in live:
                if v not in keep:
                    report.removed_versions.append(str(v))
                    if not dry_run:
                        self._remove_version(dataset, v, manifests[v])
        # what still needs data: live manifests, and versions removed less than the grace ago;
        # listed again after the removals, so a version published meanwhile counts too
        needed: set[str] = set()
        for name in storage.list_dirs(self.dataset_dir(dataset)):
            if not Version.is_version(name):
                continue
            m, removed_at = self._manifest_or_tombstone(dataset, name)
            if m is None:
                continue
            if removed_at is None and name in report.removed_versions:
                removed_at = now  # dry run: removed now
            gone = removed_at is not None and time.time() - removed_at >= grace_seconds
            if not gone:
                vdir = self.version_dir(dataset, name)
                needed |= {_batch_of(shard_uri(m, vdir, s)) for s in m.shards}
        for batch in self._batches(dataset):
            if batch in needed:
                continue
            files = storage.list_files(batch)
            # young by its newest file, or by the start in its name: a batch being filled may
            # still be empty (a folder made, no shard linked yet) and must not go meanwhile
            times = [f.mtime for f in files] + [t for t in [_batch_started(batch)] if t]
            if times and now - max(times) < grace_seconds:
                report.pending.append(batch)
                continue
            report.removed_data.append(batch)
            report.freed_bytes += sum(f.size for f in files)
            if not dry_run:
                storage.delete_tree(batch)
        # an empty version folder stays: a publisher may be creating its manifest right now
        return report

    def _remove_version(self, dataset: str, version: Version, manifest: Manifest) -> None:
        vdir = self.version_dir(dataset, version)
        body = {"version": str(version), "removed": store.now(), "manifest": manifest.to_dict()}
        storage.create_if_absent(
            storage.join(vdir, REMOVED), json.dumps(body, indent=2, sort_keys=True).encode()
        )
        storage.delete(storage.join(vdir, MANIFEST))
        for name in ("dataset_info.json", "features.json"):
            storage.delete(storage.join(vdir, name))
        storage.delete_tree(storage.join(vdir, "tfds"))  # tfds_meta.VIEW

    def _manifest_or_tombstone(
        self, dataset: str, version: str
    ) -> tuple[Manifest | None, float | None]:
        """A version's manifest and, when gc removed it, when (seconds since the epoch)."""
        vdir = self.version_dir(dataset, version)
        tombstone = storage.join(vdir, REMOVED)
        try:
            return Manifest.load(storage.read_text(storage.join(vdir, MANIFEST))), None
        except FileNotFoundError:
            pass
        try:
            removed = json.loads(storage.read_text(tombstone))
        except FileNotFoundError:
            return None, None
        when = dt.datetime.fromisoformat(removed["removed"]).timestamp()
        return Manifest.from_dict(removed["manifest"], tombstone), when

    def _batches(self, dataset: str) -> list[str]:
        """Every folder shards are kept in: batches, and format-1 versions' attempt folders."""
        ddir = self.dataset_dir(dataset)
        out = [storage.join(ddir, DATA, b) for b in storage.list_dirs(storage.join(ddir, DATA))]
        for name in storage.list_dirs(ddir):
            if Version.is_version(name):
                vdir = self.version_dir(dataset, name)
                out += [
                    storage.join(vdir, d) for d in storage.list_dirs(vdir) if d.startswith("data-")
                ]
        return out


@dataclasses.dataclass
class GcReport:
    """What :meth:`Registry.gc` removed (or would, in a dry run)."""

    dry_run: bool
    removed_versions: list[str] = dataclasses.field(default_factory=list)
    removed_data: list[str] = dataclasses.field(default_factory=list)
    freed_bytes: int = 0
    #: unreferenced data younger than the grace period, left for a later run
    pending: list[str] = dataclasses.field(default_factory=list)


def parse_duration(text: str) -> float:
    """Seconds in ``30d``, ``12h``, ``90m`` or ``3600s``.

    Raises:
        UserError: Naming the text that is not such a duration.

    """
    units = {"d": 86400, "h": 3600, "m": 60, "s": 1}
    number, unit = text[:-1], text[-1:]
    try:
        value = float(number)
    except ValueError:
        value = -1.0
    if unit not in units or value < 0:
        raise UserError(f"duration {text!r}: use a number and d, h, m or s (30d, 12h, 90m)")
    return value * units[unit]


def _new_batch_name() -> str:
    """A name for a batch a publish fills: ``publish-<unix seconds>-<random>``."""
    return f"publish-{int(time.time())}-{uuid.uuid4().hex[:8]}"


def _batch_started(batch: str) -> float | None:
    """When the publish that fills ``batch`` started, from its name (None for other batches)."""
    parts = storage.basename(batch).split("-")
    if len(parts) == 3 and parts[0] == "publish" and parts[1].isdigit():
        return float(parts[1])
    return None


def _batch_of(uri: str) -> str:
    """The batch (or format-1 attempt folder) a shard lies in: its folder."""
    return storage.parent(uri)


def _age_base(manifest: Manifest) -> float:
    return dt.datetime.fromisoformat(manifest.created).timestamp()


def shard_uris(manifest: Manifest, version_dir: str, split: str) -> list[str]:
    """Full URIs of one split's shards, in shard order."""
    shards = sorted((s for s in manifest.shards if s["split"] == split), key=lambda s: s["index"])
    if not shards:
        raise RegistryError(
            f"{manifest.ref} has no split {split!r} (splits: {sorted(manifest.splits)})"
        )
    return [shard_uri(manifest, version_dir, s) for s in shards]


def shard_uri(manifest: Manifest, version_dir: str, shard: dict[str, Any]) -> str:
    """Where one shard of a manifest is.

    Its path is relative to the dataset's folder (format 2) or to the version's folder (format 1,
    shards copied into the version).
    """
    base = storage.parent(version_dir) if manifest.shards_in_batches else version_dir
    return storage.join(base, shard["path"])


def _relative(uri: str, base: str) -> str:
    return uri[len(base) + 1 :] if storage.is_remote(uri) else storage.relative_to(uri, base)


def _safe(name: str) -> bool:
    try:
        check_name(name)
    except InvalidName:
        return False
    return True


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


def iter_versions(reg: Registry, dataset: str) -> Iterator[Manifest]:
    """Manifests of every version, newest first."""
    for v in reversed(reg.versions(dataset)):
        yield reg.manifest(dataset, v)


def resolve_dataset(ref: str) -> tuple[Manifest, str]:
    """``(manifest, version folder)`` for a dataset reference or a version folder."""
    direct = storage.join(storage.normalize(ref), "manifest.json")
    if "@" not in ref and storage.exists(direct):
        return Manifest.load(storage.read_text(direct), direct), storage.normalize(ref)
    reg, dataset, version = Registry.resolve_ref(ref)
    return reg.manifest(dataset, version), reg.version_dir(dataset, version)
