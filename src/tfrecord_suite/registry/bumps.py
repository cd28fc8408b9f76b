"""The version-bump policy: whether a new version is a major, minor or patch bump, and why.

From two manifests (or a manifest and staged shards) :func:`required_bump` decides the smallest
bump: a breaking schema change is major; a compatible schema change or different records are
minor; the same records and schema serialized differently (other shard counts, compression) are a
patch. An appended version is a minor bump (:data:`APPEND`). A publish may ask for a bump
(:data:`REQUESTS`); :func:`bump_for` grants one at least as high as the changes require and
refuses a lower one (:class:`BumpRefused`).
"""

from __future__ import annotations

from typing import Any

from tfrecord_suite.errors import UserError
from tfrecord_suite.registry.manifest import Manifest, RegistryError
from tfrecord_suite.registry.refs import Version, bump_rank
from tfrecord_suite.schema import Schema, diff_schemas

#: What a publish may ask for: the bump the changes require (``auto``), or one of the three.
REQUESTS = ("auto", "major", "minor", "patch")
#: The bump of an appended version: its parent's schema, more records.
APPEND = "minor"


class BumpRefused(RegistryError):
    """The requested bump is lower than the changes require."""


def check_request(bump: str) -> str:
    """Return ``bump`` if a publish may ask for it.

    Raises:
        UserError: Naming the bumps there are.

    """
    if bump not in REQUESTS:
        raise UserError(f"--bump {bump!r}: use auto, major, minor or patch")
    return bump


def required_bump(
    old: Manifest | None, new: Manifest | dict[str, Any]
) -> tuple[str | None, list[str]]:
    """The smallest bump from manifest ``old`` to ``new``, and why.

    ``new`` is a manifest, or staged shards as
    :func:`~tfrecord_suite.registry.content.describe_staged` describes them.

    Returns:
        ``("major" | "minor" | "patch", reasons)``; ``(None, reasons)`` when there is no parent
        (``["first version"]``) or the content is identical.

    """
    if old is None:
        return None, ["first version"]
    if isinstance(new, Manifest):
        new = new.to_dict()
    diff = diff_schemas(Schema.from_dict(old.schema), Schema.from_dict(new["schema"]))
    if diff["breaking"]:
        return "major", diff["breaking"]
    reasons = list(diff["compatible"])
    records_changed = []
    for split in sorted(set(old.splits) | set(new["splits"])):
        a = old.splits.get(split, {})
        b = new["splits"].get(split, {})
        if a.get("records_digest") != b.get("records_digest"):
            records_changed.append(
                f"split {split!r}: records changed ({a.get('records', 0)} -> {b.get('records', 0)})"
            )
    if reasons or records_changed:
        return "minor", reasons + records_changed
    if old.content_digest == new.get("content_digest"):
        return None, ["identical content"]
    layout = []
    for split in sorted(new["splits"]):
        a = old.splits.get(split, {}).get("shards")
        b = new["splits"][split]["shards"]
        if a != b:
            layout.append(f"split {split!r}: {a} -> {b} shards")
    if old.gzip != bool(new.get("gzip")):
        layout.append(f"gzip {old.gzip} -> {bool(new.get('gzip'))}")
    return "patch", layout or ["same records and schema, different serialization"]


def bump_for(
    dataset: str,
    parent: Version | None,
    parent_manifest: Manifest | None,
    body: dict[str, Any],
    bump: str,
) -> tuple[str | None, list[str]]:
    """The bump of a new version of ``dataset`` holding ``body`` over ``parent``, and why.

    Args:
        dataset: Dataset name (for the message).
        parent: The version it follows, None for the first.
        parent_manifest: That version's manifest.
        body: The new content, as :func:`~tfrecord_suite.registry.content.describe_staged` gives it.
        bump: What was asked for (:data:`REQUESTS`): ``auto`` takes the required bump.

    Returns:
        ``(bump, reasons)`` as :func:`required_bump` gives them, or the requested bump with the
        reasons and the request.

    Raises:
        BumpRefused: The requested bump is lower than the changes require.

    """
    kind, reasons = required_bump(parent_manifest, body)
    if bump == "auto":
        return kind, reasons
    if kind is not None and bump_rank(bump) < bump_rank(kind):
        raise BumpRefused(
            f"--bump {bump} refused: the changes since {dataset}@{parent} need a "
            f"{kind} bump ({'; '.join(reasons)})"
        )
    return bump, [*reasons, f"{bump} requested"]
