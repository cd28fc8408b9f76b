"""The ``models`` commands: the model registry's CLI (:mod:`tfrecord_suite.registry.models`)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click

from tfrecord_suite.cli.common import emit, friendly_errors, json_option
from tfrecord_suite.errors import UserError
from tfrecord_suite.io import storage


@click.group()
def models() -> None:
    """Registered models: list, show, verify and promote."""


def _model_registry(root: str) -> Any:
    from tfrecord_suite.registry.models import ModelRegistry

    return ModelRegistry(root)


def _resolve_model(reg: Any, name: str, selector: str) -> Any:
    model = reg.resolve(name, selector)
    if model is None:
        raise UserError(f"model {name} has no version {selector!r} in {reg.root}")
    return model


@models.command("list")
@click.option("--registry", "root", required=True, help="Model registry root (<registry>/_models).")
@click.option("--model", "name", required=True, help="Model name (the dataset name by default).")
@json_option
@friendly_errors
def models_list(root: str, name: str, as_json: bool) -> None:
    """List a model's versions and aliases."""
    out = _model_registry(root).listing(name)
    emit(
        out,
        as_json,
        lambda o: (
            "\n".join(
                f"v{r['version']}  {r['created']}  {r['dataset']}  gate={r['gate']}"
                + (f"  [{', '.join(r['aliases'])}]" if r["aliases"] else "")
                for r in o
            )
            or "(no versions)"
        ),
    )


def _model_version_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """--registry, --model and --version (a number or an alias), shared by show and verify."""
    fn = click.option(
        "--version", "selector", default="stable", show_default=True, help="Number or alias."
    )(fn)
    fn = click.option("--model", "name", required=True, help="Model name.")(fn)
    return click.option("--registry", "root", required=True, help="Model registry root.")(fn)


@models.command("show")
@_model_version_options
@json_option
@friendly_errors
def models_show(root: str, name: str, selector: str, as_json: bool) -> None:
    """Show a model version's manifest (files, lineage, evaluation)."""
    model = _resolve_model(_model_registry(root), name, selector)
    emit({**model.manifest, "export_dir": model.export_dir}, True)


@models.command("verify")
@_model_version_options
@json_option
@friendly_errors
def models_verify(root: str, name: str, selector: str, as_json: bool) -> None:
    """Recompute every file's checksum of a model version."""
    reg = _model_registry(root)
    model = _resolve_model(reg, name, selector)
    reg.verify(name, model.version)
    emit(
        {
            "model": name,
            "version": model.version,
            "files": len(model.manifest["files"]),
            "ok": True,
        },
        as_json,
        lambda o: f"OK {name} v{o['version']}: {o['files']} files verified",
    )


@models.command("promote")
@click.option("--registry", "root", required=True, help="Model registry root.")
@click.option("--model", "name", required=True, help="Model name.")
@click.option("--version", "version", required=True, type=int, help="Version to promote.")
@click.option("--alias", default="stable", show_default=True, help="Alias to move.")
@click.option(
    "--expect",
    default=None,
    help="Only if the alias points to this version now ('none': must not exist).",
)
@json_option
@friendly_errors
def models_promote(
    root: str, name: str, version: int, alias: str, expect: str | None, as_json: bool
) -> None:
    """Point ALIAS at a model version by hand (compare-and-swap with --expect)."""
    expected: Any = ...
    if expect is not None:
        expected = None if expect.lower() == "none" else int(expect)
    try:
        _model_registry(root).set_alias(name, alias, version, expected=expected)
    except storage.PreconditionFailed as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    emit(
        {"model": name, "alias": alias, "version": version},
        as_json,
        lambda o: f"{name}@{alias} -> v{version}",
    )
