"""``tfrecord-suite``: the command line.

Every step command maps its flags one-to-one onto the step's config dataclass (see
:mod:`tfrecord_suite.cliutil`). Known errors print one line (``error: ...``) and exit 2; there is no
traceback unless ``--debug`` is given.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

import click

from tfrecord_suite import __version__, cliutil, storage
from tfrecord_suite.errors import UserError

EXIT_USAGE = 2


def _known_errors() -> tuple[type[BaseException], ...]:
    """What the CLI shows as one line: what the user can fix, and faults of the environment.

    Everything else is a bug and keeps its traceback (as does everything with ``--debug``).
    """
    from tfrecord_suite.image_build import ImageBuildError

    return (UserError, FileNotFoundError, storage.StorageError, ImageBuildError)


def friendly_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn known exceptions into one ``error:`` line and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except click.exceptions.Exit:
            raise
        except Exception as exc:
            ctx = click.get_current_context(silent=True)
            debug = bool(ctx and ctx.find_root().params.get("debug"))
            if debug or not isinstance(exc, _known_errors()):
                raise
            click.echo(f"error: {exc}", err=True)
            sys.exit(EXIT_USAGE)

    return wrapper


def _emit(result: Any, as_json: bool, human: Callable[[Any], str] | None = None) -> None:
    if as_json:
        click.echo(json.dumps(result, indent=2, sort_keys=True, default=str))
    elif human is not None:
        click.echo(human(result))
    else:
        click.echo(json.dumps(result, indent=2, sort_keys=True, default=str))


json_option = click.option("--json", "as_json", is_flag=True, help="Print a JSON summary.")


def _stdout_for(as_json: bool) -> Any:
    """With ``--json``, send everything else printed to stdout (Keras progress...) to stderr."""
    import contextlib

    return contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext()


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="tfrecord-suite")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@click.option("-v", "--verbose", is_flag=True, help="Log at INFO level.")
def main(debug: bool, verbose: bool) -> None:
    """Raw data -> sharded TFRecords -> versioned datasets -> distributed training, on Kubeflow."""
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


# ----------------------------------------------------------------------------------------- shard


def _shard_config_cls() -> type:
    from tfrecord_suite.shard.step import ShardConfig

    return ShardConfig


@main.command()
@cliutil.dataclass_options(_shard_config_cls(), exclude=("beam_args",))
@json_option
@click.argument("beam_args", nargs=-1, type=click.UNPROCESSED)
@friendly_errors
def shard(as_json: bool, beam_args: tuple[str, ...], **values: Any) -> None:
    """Shard raw data into TFRecord files with Apache Beam.

    Beam pipeline options go after `--`, e.g.
    `-- --runner DataflowRunner --project P --region R --temp_location gs://b/tmp`; before it,
    an unknown flag is an error (a misspelt flag is never passed to Beam, which would drop it).
    """
    from tfrecord_suite.shard.step import ShardConfig, run_shard

    config = cliutil.build(ShardConfig, values, beam_args=list(beam_args))
    with _stdout_for(as_json):
        summary = run_shard(config)
    _emit(_shard_brief(summary) if as_json else summary, as_json, _shard_human)


def _shard_brief(s: dict[str, Any]) -> dict[str, Any]:
    return {
        k: s[k]
        for k in (
            "output",
            "format",
            "records",
            "bad_rows",
            "rows_read",
            "dead_letter",
            "seconds",
            "beam_metrics",
        )
    } | {
        "splits": {k: v["count"] for k, v in s["statistics"].items()},
        "shards": [x["path"] for x in s["shards"]],
    }


def _shard_human(s: dict[str, Any]) -> str:
    lines = [
        f"{s['records']} records ({s['format']}, {s['bad_rows']} bad rows) -> {s['output']} "
        f"in {s['seconds']:.1f} s"
    ]
    for split, p in s["plan"]["splits"].items():
        lines.append(
            f"  {split}: {p['records']} records in {p['num_shards']} shard(s) "
            f"[{'; '.join(p['reasons'])}]"
        )
    if s["dead_letter"]:
        lines.append(f"  dead letters: {s['dead_letter']}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------- version


@main.group()
def version() -> None:
    """Publish, list, inspect, verify, diff, alias and clean dataset versions."""


def _registry(root: str) -> Any:
    from tfrecord_suite.registry.registry import Registry

    return Registry(root)


def _parse_ref(ref: str) -> tuple[Any, str, Any]:
    from tfrecord_suite.registry.registry import Registry

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
    _emit(
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
    _emit(
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
    _emit(manifest, as_json, lambda m: dataset_card(m, parent))


@version.command("verify")
@click.argument("ref")
@json_option
@friendly_errors
def version_verify(ref: str, as_json: bool) -> None:
    """Recompute every checksum and record count; exit 1 naming each bad shard."""
    from tfrecord_suite.registry.registry import VerificationError

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
    _emit(
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

    _emit(d, as_json, human)


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
    _emit(
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
    _emit(
        {"removed": removed, "dry_run": dry_run},
        as_json,
        lambda o: "\n".join(o["removed"]) or "nothing to remove",
    )


# ---------------------------------------------------------------------------------------- models


@main.group()
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
    reg = _model_registry(root)
    out = []
    aliases: dict[int, list[str]] = {}
    for info in storage.list_files(storage.join(reg.model_dir(name), "aliases")):
        alias = storage.basename(info.uri).removesuffix(".json")
        aliases.setdefault(reg.alias(name, alias), []).append(alias)
    for v in reg.versions(name):
        m = reg.get(name, v).manifest
        evaluation = m["lineage"].get("evaluation", {})
        out.append(
            {
                "version": v,
                "created": m["created"],
                "dataset": m["lineage"].get("dataset"),
                "gate": evaluation.get("decision"),
                "aliases": sorted(aliases.get(v, [])),
            }
        )
    _emit(
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
    _emit({**model.manifest, "export_dir": model.export_dir}, True)


@models.command("verify")
@_model_version_options
@json_option
@friendly_errors
def models_verify(root: str, name: str, selector: str, as_json: bool) -> None:
    """Recompute every file's checksum of a model version."""
    reg = _model_registry(root)
    model = _resolve_model(reg, name, selector)
    reg.verify(name, model.version)
    _emit(
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
    _emit(
        {"model": name, "alias": alias, "version": version},
        as_json,
        lambda o: f"{name}@{alias} -> v{version}",
    )


# ----------------------------------------------------------------------------------------- train


def _train_config_cls() -> type:
    from tfrecord_suite.train.trainer import TrainConfig

    return TrainConfig


@main.command()
@cliutil.dataclass_options(_train_config_cls())
@json_option
@friendly_errors
def train(as_json: bool, **values: Any) -> None:
    """Train on a dataset version under tf.distribute and export a servable model."""
    from tfrecord_suite.train.trainer import TrainConfig, run_train

    with _stdout_for(as_json):
        metrics = run_train(cliutil.build(TrainConfig, values))
    _emit(
        metrics,
        as_json,
        lambda m: (
            f"trained on {m['dataset']} ({m['strategy']}, {m['replicas']} replicas): "
            + ", ".join(
                f"{s} " + " ".join(f"{k}={v:.4f}" for k, v in e.items())
                for s, e in m["evaluation"].items()
            )
            + f"\nmodel: {m['export_dir']}\nmetrics: {storage.join(m['model_dir'], 'metrics.json')}"
        ),
    )


# ------------------------------------------------------------------------------------ run / demo


def _run_human(r: dict[str, Any]) -> str:
    metrics = ", ".join(f"{k}={v}" for k, v in sorted(r["metrics"].items()))
    return (
        f"dataset version: {r['dataset_ref']}\n  folder: {r['dataset_uri']}\n"
        f"model: {r['export_dir']}\nmetrics: {r['metrics_file']}\n  {metrics}\n"
        f"registered model: v{r.get('registered_model')} at {r.get('registered_model_uri')}\n"
        f"gate: {r.get('gate')} ({r.get('gate_reason')})"
        + (f"\nfull log: {r['log']}" if r.get("log") else "")
    )


@main.command()
@click.option("--input", "input_uri", required=True, help="Raw data: file, folder, glob or gs://.")
@click.option(
    "--format",
    "input_format",
    default="auto",
    show_default=True,
    help="auto, csv, tsv, jsonl, parquet, images or text.",
)
@click.option("--workdir", required=True, help="Local folder standing in for the bucket.")
@click.option("--dataset-name", default=None, help="Registry name (default: from the input).")
@click.option("--label", default="", help="Label column (tabular).")
@click.option("--epochs", default=5, show_default=True, type=int)
@click.option("--batch-size", default=64, show_default=True, type=int)
@click.option("--learning-rate", default=0.001, show_default=True, type=float)
@click.option("--strategy", default="auto", show_default=True)
@click.option(
    "--cpu-devices",
    default=1,
    show_default=True,
    type=int,
    help="Logical CPU devices (MirroredStrategy without GPUs).",
)
@click.option(
    "--feature-config",
    default="",
    help="Feature transforms of the built-in model (YAML/JSON); inferred when empty.",
)
@click.option(
    "--runner",
    type=click.Choice(["subprocess", "docker"]),
    default="subprocess",
    show_default=True,
    help="subprocess: steps in this Python environment; docker: each step in its image "
    "(through DOCKER_HOST), as Kubeflow runs them; the input must be inside --workdir.",
)
@json_option
@friendly_errors
def run(
    input_uri: str,
    input_format: str,
    workdir: str,
    dataset_name: str | None,
    label: str,
    epochs: int,
    batch_size: int,
    learning_rate: float,
    strategy: str,
    cpu_devices: int,
    feature_config: str,
    runner: str,
    as_json: bool,
) -> None:
    """Run the whole pipeline DAG locally with kfp.local.

    Shard -> version -> train -> evaluate against the stable model -> register -> promote if at
    least as good -> report.
    """
    from tfrecord_suite.local_run import run_local
    from tfrecord_suite.registry.semver import check_name
    from tfrecord_suite.shard import sources

    files = sources.resolve_inputs(input_uri)  # fail fast, with one line, before kfp starts
    if feature_config:
        import os

        from tfrecord_suite.train.features import load_feature_config

        load_feature_config(feature_config)
        if os.path.isfile(feature_config):
            feature_config = os.path.abspath(feature_config)
    if input_format == "auto":
        sources.detect_format(input_uri, files)
    elif input_format not in sources.FORMATS:
        raise UserError(
            f"--format {input_format!r}: use auto or one of {', '.join(sources.FORMATS)}"
        )
    name = check_name(dataset_name or _default_name(input_uri))
    with _stdout_for(as_json):
        result = run_local(
            input_uri=input_uri,
            workdir=workdir,
            dataset_name=name,
            input_format=input_format,
            label=label,
            epochs=epochs,
            batch_size=batch_size,
            learning_rate=learning_rate,
            strategy=strategy,
            cpu_devices=cpu_devices,
            feature_config=feature_config,
            runner=runner,
        )
    _emit(result, as_json, _run_human)


def _default_name(input_uri: str) -> str:
    import re

    base = storage.basename(storage.normalize(input_uri)).split(".")[0].lower()
    return re.sub(r"[^a-z0-9_-]", "-", base).strip("-_") or "dataset"


@main.command()
@click.option(
    "--workdir",
    default="demo-bucket",
    show_default=True,
    help="Local folder standing in for the bucket.",
)
@json_option
@friendly_errors
def demo(workdir: str, as_json: bool) -> None:
    """Run the DAG on two small real datasets: digits (PNG folders) and penguins (CSV)."""
    from tfrecord_suite import demo_data
    from tfrecord_suite.local_run import run_local

    workdir = storage.normalize(workdir)
    raw = os.path.join(workdir, "raw")
    digits = os.path.join(raw, "digits")
    if not os.path.isdir(digits):
        demo_data.write_digits(digits)
    penguins = demo_data.write_penguins(os.path.join(raw, "penguins", "penguins.csv"))
    results = {}
    for name, path, params in (
        ("digits", digits, {"epochs": 12, "batch_size": 32, "learning_rate": 0.003}),
        ("penguins", penguins, {"epochs": 15, "batch_size": 16, "learning_rate": 0.01}),
    ):
        click.echo(f"== {name}: {path}", err=True)
        with _stdout_for(as_json):
            results[name] = run_local(input_uri=path, workdir=workdir, dataset_name=name, **params)
    _emit(
        results, as_json, lambda rs: "\n\n".join(f"== {n}\n{_run_human(r)}" for n, r in rs.items())
    )


# ----------------------------------------------------------------------------------------- bench


def _image_build_config_cls() -> type:
    from tfrecord_suite.image_build import ImageBuildConfig

    return ImageBuildConfig


@main.group("images")
def images_group() -> None:
    """Container images: list them, build and push them with the Docker SDK."""


@images_group.command("list")
@click.option("--image-registry", default=None, help="Registry (and path) of the images.")
@click.option("--image-tag", default=None, help="Tag of the images.")
@json_option
@friendly_errors
def images_list(image_registry: str | None, image_tag: str | None, as_json: bool) -> None:
    """The image names and Dockerfiles (one place: tfrecord_suite/images.py)."""
    from tfrecord_suite import images

    chosen = images.ImageSet(
        image_registry or images.DEFAULT_REGISTRY, image_tag or images.DEFAULT_TAG
    )
    table = {k: {"image": ref, "dockerfile": df} for k, (ref, df) in chosen.table().items()}
    _emit(
        table,
        as_json,
        lambda t: "\n".join(f"{k}: {v['image']}  ({v['dockerfile']})" for k, v in t.items()),
    )


@images_group.command("build")
@cliutil.dataclass_options(_image_build_config_cls())
@json_option
@friendly_errors
def images_build(as_json: bool, **values: Any) -> None:
    """Build (and with --push, push) the images against the engine DOCKER_HOST names."""
    from tfrecord_suite.image_build import ImageBuildError, build_images

    try:
        with _stdout_for(as_json):
            built = build_images(
                cliutil.build(_image_build_config_cls(), values),
                progress=lambda line: click.echo(line, err=True),
            )
    except ImageBuildError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    _emit(
        built,
        as_json,
        lambda b: "\n".join(
            f"{x['image']} {x['id'][:19]}{' pushed' if x['pushed'] else ''}" for x in b
        ),
    )


def _bench_config_cls() -> type:
    from tfrecord_suite.bench import BenchConfig

    return BenchConfig


@main.command()
@cliutil.dataclass_options(_bench_config_cls())
@json_option
@friendly_errors
def bench(as_json: bool, **values: Any) -> None:
    """Measure reading, writing and training throughput against the naive way and peers."""
    from tfrecord_suite.bench import BenchConfig, markdown, run_bench

    with _stdout_for(as_json):
        results = run_bench(cliutil.build(BenchConfig, values))
    _emit(results, as_json, markdown)


# ------------------------------------------------------------------------------ compile / submit


def _placement_cls() -> type:
    from tfrecord_suite.launch.placement import Placement

    return Placement


def _deployment_cls() -> type:
    from tfrecord_suite.pipelines.placement import Deployment

    return Deployment


@main.command("compile")
@click.option(
    "--output",
    default="pipelines/tfrecord_suite_pipeline.yaml",
    show_default=True,
    help="Where to write the pipeline YAML.",
)
@cliutil.dataclass_options(_placement_cls())
@cliutil.dataclass_options(_deployment_cls())
@json_option
@friendly_errors
def compile_(output: str, as_json: bool, **values: Any) -> None:
    """Compile the pipeline to YAML for the Kubeflow UI (needs only kfp).

    The placement flags put the train step on GPU or TPU nodes (node selector, toleration,
    accelerator limit); /dev/shm is always an in-memory volume.
    """
    from tfrecord_suite.pipelines.compile import compile_pipeline

    path = compile_pipeline(
        output, cliutil.build(_placement_cls(), values), cliutil.build(_deployment_cls(), values)
    )
    _emit({"output": path}, as_json, lambda o: f"wrote {o['output']}")


@main.command()
@click.option("--host", required=True, help="Kubeflow Pipelines API endpoint.")
@click.option("--experiment", default="tfrecord-suite", show_default=True)
@click.option("--param", "params", multiple=True, help="Pipeline parameter k=v (repeatable).")
@click.option(
    "--schedule",
    default=None,
    help="Cron expression with six fields, seconds first ('0 0 3 * * *'): a recurring run.",
)
@click.option(
    "--pipeline-root",
    default=None,
    help="Artifact root for this run (gs://, s3:// or minio://); default: the cluster's.",
)
@click.option("--run-name", default=None, help="Run (or recurring run) name.")
@click.option("--pipeline-name", default="tfrecord-suite", show_default=True)
@click.option("--wait/--no-wait", default=False, help="Wait for the run to finish.")
@click.option("--timeout", default=3600, show_default=True, help="Seconds to wait with --wait.")
@click.option(
    "--service-account",
    default="tfrecord-suite",
    show_default=True,
    help="Kubernetes service account of the run's pods (Workload Identity; empty: KFP's default).",
)
@cliutil.dataclass_options(_placement_cls())
@cliutil.dataclass_options(_deployment_cls())
@json_option
@friendly_errors
def submit(
    host: str,
    experiment: str,
    params: tuple[str, ...],
    schedule: str | None,
    run_name: str | None,
    pipeline_name: str,
    wait: bool,
    timeout: int,
    service_account: str,
    pipeline_root: str | None,
    as_json: bool,
    **placement: Any,
) -> None:
    """Upload a pipeline version and start a run (or a recurring run) with kfp.Client.

    The placement, image and resource flags are those of ``compile``: the uploaded version is
    compiled with them.
    """
    from tfrecord_suite.submit import parse_params, submit_pipeline

    result = submit_pipeline(
        placement=cliutil.build(_placement_cls(), placement),
        deployment=cliutil.build(_deployment_cls(), placement),
        pipeline_root=pipeline_root,
        service_account=service_account,
        host=host,
        experiment=experiment,
        params=parse_params(params),
        schedule=schedule,
        run_name=run_name,
        pipeline_name=pipeline_name,
        wait=wait,
        timeout=timeout,
    )
    _emit(result, as_json)
    if wait and result.get("state") not in (None, "SUCCEEDED"):
        sys.exit(1)


@main.command()
@click.option("--input", "input_uri", required=True, help="Raw data: file, folder, glob or gs://.")
@click.option("--registry", "registry_root", required=True, help="Dataset registry root.")
@click.option("--dataset", required=True, help="Dataset name.")
@click.option("--host", required=True, help="Kubeflow Pipelines API endpoint.")
@click.option(
    "--if-changed",
    is_flag=True,
    help="Submit only when the input fingerprint differs from the latest version's.",
)
@click.option("--experiment", default="tfrecord-suite-retrain", show_default=True)
@click.option("--param", "params", multiple=True, help="Other pipeline parameter k=v.")
@click.option("--wait/--no-wait", default=False, help="Wait for the run to finish.")
@json_option
@friendly_errors
def retrain(
    input_uri: str,
    registry_root: str,
    dataset: str,
    host: str,
    if_changed: bool,
    experiment: str,
    params: tuple[str, ...],
    wait: bool,
    as_json: bool,
) -> None:
    """Submit the pipeline for new data (from CI or a CronJob); skip unchanged data."""
    from tfrecord_suite.retrain import retrain as run_retrain
    from tfrecord_suite.submit import parse_params, submit_pipeline

    result = run_retrain(
        input_uri=input_uri,
        registry_root=registry_root,
        dataset=dataset,
        if_changed=if_changed,
        params=parse_params(params),
        submit=lambda p: submit_pipeline(host=host, experiment=experiment, params=p, wait=wait),
    )
    _emit(
        result, as_json, lambda r: ("submitted: " if r["submitted"] else "skipped: ") + r["reason"]
    )


if __name__ == "__main__":  # pragma: no cover
    main()
