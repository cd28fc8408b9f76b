"""The ``version`` commands: publish, list, show, verify, diff, alias and gc dataset versions."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from tfrecord_suite.cli.common import emit, friendly_errors, json_option
from tfrecord_suite.errors import UserError
from tfrecord_suite.io import storage


@click.group()
def version() -> None:
    """Publish, list, inspect, verify, diff, alias and clean dataset versions."""


def _registry(root: str) -> Any:
    from tfrecord_suite.registry.datasets import Registry

    return Registry(root)


def _parse_ref(ref: str) -> tuple[Any, str, Any]:
    from tfrecord_suite.registry.datasets import Registry

    return Registry.resolve_ref(ref)


@version.command("publish")
@click.option("--staged", required=True, help="A shard step's output folder.")
@click.option("--registry", "root", required=True, help="Registry root (folder, gs:// or s3://).")
@click.option("--dataset", required=True, help="Dataset name.")
@click.option(
    "--bump",
    default="auto",
    show_default=True,
    type=click.Choice(["auto", "major", "minor", "patch"]),
    help="Version bump.",
)
@click.option(
    "--append",
    is_flag=True,
    help="A MINOR version of the latest version's shards (referenced, not copied) plus these.",
)
@json_option
@friendly_errors
def version_publish(
    staged: str, root: str, dataset: str, bump: str, append: bool, as_json: bool
) -> None:
    """Publish staged shards as a new version (idempotent for identical content).

    Shards staged on the registry's own storage are linked (locally) or referenced in place
    (a shard step's output under <registry>/<dataset>/_data/), not copied.
    """
    before = storage.bytes_copied()
    result = _registry(root).publish(staged, dataset, bump, append=append)
    cost = result.manifest.storage or {}
    out = {
        "dataset": dataset,
        "version": result.version,
        "uri": result.uri,
        "created": result.created,
        "bump": result.manifest.bump,
        "reasons": result.manifest.bump_reasons,
        "digest": result.manifest.content_digest,
        "added_bytes": cost.get("added_bytes"),
        "shared_bytes": cost.get("shared_bytes"),
        "copied_bytes": storage.bytes_copied() - before,
    }
    emit(
        out,
        as_json,
        lambda o: (
            f"{'published' if o['created'] else 'already published as'} {dataset}@{o['version']} "
            f"({o['bump']}: {'; '.join(o['reasons'])}) at {o['uri']}; "
            f"{o['added_bytes']} bytes added, {o['shared_bytes']} shared, "
            f"{o['copied_bytes']} copied"
        ),
    )


@version.command("list")
@click.option("--registry", "root", required=True, help="Registry root.")
@click.option("--dataset", default=None, help="Only this dataset.")
@json_option
@friendly_errors
def version_list(root: str, dataset: str | None, as_json: bool) -> None:
    """List datasets and their versions and aliases."""
    reg = _registry(root)
    out = {}
    for name in [dataset] if dataset else reg.datasets():
        out[name] = {"versions": [str(v) for v in reg.versions(name)], "aliases": reg.aliases(name)}
    emit(
        out,
        as_json,
        lambda o: "\n".join(
            f"{n}: {', '.join(d['versions']) or '(none)'}"
            + (f"  aliases: {d['aliases']}" if d["aliases"] else "")
            for n, d in o.items()
        ),
    )


@version.command("show")
@click.argument("ref")
@json_option
@friendly_errors
def version_show(ref: str, as_json: bool) -> None:
    """Show the manifest of REF (<registry>/<dataset>@<version|alias>)."""
    from tfrecord_suite.registry.card import dataset_card

    reg, dataset, v = _parse_ref(ref)
    manifest = reg.manifest(dataset, v)
    parent = reg.manifest(dataset, manifest.parent) if manifest.parent else None
    emit(manifest.to_dict(), as_json, lambda _: dataset_card(manifest, parent))


@version.command("verify")
@click.argument("ref")
@json_option
@friendly_errors
def version_verify(ref: str, as_json: bool) -> None:
    """Recompute every checksum and record count; exit 1 naming each bad shard."""
    from tfrecord_suite.registry.datasets import VerificationError

    reg, dataset, v = _parse_ref(ref)
    try:
        result = reg.verify(dataset, v)
    except VerificationError as exc:
        if as_json:
            click.echo(json.dumps({"ok": False, "problems": exc.problems}, indent=2))
        else:
            for p in exc.problems:
                click.echo(f"BAD {p}", err=True)
        sys.exit(1)
    emit(
        result,
        as_json,
        lambda r: f"OK {dataset}@{v}: {r['shards']} shards, {r['records']} records verified",
    )


@version.command("diff")
@click.argument("ref_a")
@click.argument("ref_b")
@json_option
@friendly_errors
def version_diff(ref_a: str, ref_b: str, as_json: bool) -> None:
    """Schema and per-split count changes from REF_A to REF_B (same dataset)."""
    reg, dataset, a = _parse_ref(ref_a)
    reg_b, dataset_b, b = _parse_ref(ref_b)
    if (reg_b.root, dataset_b) != (reg.root, dataset):
        raise UserError("diff compares two versions of the same dataset in the same registry")
    d = reg.diff(dataset, a, b)

    def human(d: dict[str, Any]) -> str:
        lines = [f"{dataset} {a} -> {b}: needs {d['bump_needed'] or 'no'} bump"]
        lines += [f"  breaking: {x}" for x in d["schema"]["breaking"]]
        lines += [f"  compatible: {x}" for x in d["schema"]["compatible"]]
        lines += [
            f"  {s}: {c['from']} -> {c['to']} ({c['change']:+d})" for s, c in d["splits"].items()
        ]
        return "\n".join(lines)

    emit(d, as_json, human)


@version.command("alias")
@click.argument("ref")
@click.option("--name", required=True, help="Alias to set (e.g. stable).")
@click.option(
    "--expect",
    default=None,
    help="Only if the alias points to this version now ('none': must not exist).",
)
@json_option
@friendly_errors
def version_alias(ref: str, name: str, expect: str | None, as_json: bool) -> None:
    """Point alias NAME at the version REF resolves to (compare-and-swap)."""
    reg, dataset, v = _parse_ref(ref)
    expected: Any = ...
    if expect is not None:
        expected = None if expect.lower() == "none" else expect
    try:
        reg.set_alias(dataset, name, v, expected=expected)
    except storage.PreconditionFailed as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    emit(
        {"dataset": dataset, "alias": name, "version": str(v)},
        as_json,
        lambda o: f"{dataset}@{name} -> {v}",
    )


@version.command("gc")
@click.option("--registry", "root", required=True, help="Registry root.")
@click.option("--dataset", required=True, help="Dataset name.")
@click.option("--keep-last", type=int, default=None, help="Keep the N newest versions.")
@click.option(
    "--keep-newer-than",
    default=None,
    help="Keep versions younger than this: 30d, 12h, 90m or 3600s.",
)
@click.option(
    "--grace-seconds",
    type=float,
    default=None,
    help="Remove data only once nothing has referenced it for this long (default 7 days: a "
    "publish may be running; lower it only when none is).",
)
@click.option("--dry-run", is_flag=True, help="Only list what would be removed.")
@json_option
@friendly_errors
def version_gc(
    root: str,
    dataset: str,
    keep_last: int | None,
    keep_newer_than: str | None,
    grace_seconds: float | None,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Remove old versions (never one an alias points to) and the data nothing references."""
    import dataclasses

    from tfrecord_suite.registry.datasets import DATA_GRACE_SECONDS, parse_duration

    report = _registry(root).gc(
        dataset,
        keep_last=keep_last,
        keep_newer_than=parse_duration(keep_newer_than) if keep_newer_than else None,
        grace_seconds=DATA_GRACE_SECONDS if grace_seconds is None else grace_seconds,
        dry_run=dry_run,
    )

    def human(r: dict[str, Any]) -> str:
        verb = "would remove" if r["dry_run"] else "removed"
        lines = [f"{verb} version {v}" for v in r["removed_versions"]]
        lines += [f"{verb} {d}" for d in r["removed_data"]]
        lines.append(f"{verb} {r['freed_bytes']} bytes")
        if r["pending"]:
            lines.append(f"{len(r['pending'])} unreferenced folders younger than the grace kept")
        return "\n".join(lines)

    emit(dataclasses.asdict(report), as_json, human)
