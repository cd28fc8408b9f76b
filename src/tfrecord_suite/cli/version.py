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

    return Registry(".").resolve_ref(ref)


@version.command("publish")
@click.option("--staged", required=True, help="A shard step's output folder.")
@click.option("--registry", "root", required=True, help="Registry root (folder or gs://).")
@click.option("--dataset", required=True, help="Dataset name.")
@click.option(
    "--bump",
    default="auto",
    show_default=True,
    type=click.Choice(["auto", "major", "minor", "patch"]),
    help="Version bump.",
)
@json_option
@friendly_errors
def version_publish(staged: str, root: str, dataset: str, bump: str, as_json: bool) -> None:
    """Publish staged shards as a new version (idempotent for identical content)."""
    result = _registry(root).publish(staged, dataset, bump)
    out = {
        "dataset": dataset,
        "version": result.version,
        "uri": result.uri,
        "created": result.created,
        "bump": result.manifest["bump"],
        "reasons": result.manifest["bump_reasons"],
        "digest": result.manifest["content_digest"],
    }
    emit(
        out,
        as_json,
        lambda o: (
            f"{'published' if o['created'] else 'already published as'} {dataset}@{o['version']} "
            f"({o['bump']}: {'; '.join(o['reasons'])}) at {o['uri']}"
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
    parent = reg.manifest(dataset, manifest["parent"]) if manifest.get("parent") else None
    emit(manifest, as_json, lambda m: dataset_card(m, parent))


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
@click.option(
    "--grace-seconds",
    default=3600.0,
    show_default=True,
    help="Leave unpublished attempts younger than this (a publish may be running).",
)
@click.option("--dry-run", is_flag=True, help="Only list what would be removed.")
@json_option
@friendly_errors
def version_gc(root: str, dataset: str, grace_seconds: float, dry_run: bool, as_json: bool) -> None:
    """Remove staging files left by crashed or losing publishers."""
    removed = _registry(root).gc(dataset, grace_seconds, dry_run)
    emit(
        {"removed": removed, "dry_run": dry_run},
        as_json,
        lambda o: "\n".join(o["removed"]) or "nothing to remove",
    )
