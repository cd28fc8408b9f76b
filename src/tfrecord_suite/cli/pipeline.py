"""Pipeline commands, part one: ``run`` and ``demo`` (the whole DAG locally)."""

from __future__ import annotations

import os
from typing import Any

import click

from tfrecord_suite.cli.common import emit, friendly_errors, json_option, stdout_for
from tfrecord_suite.io import storage
from tfrecord_suite.shard.step import ShardConfig
from tfrecord_suite.train.trainer import TrainConfig


def _run_human(r: dict[str, Any]) -> str:
    metrics = ", ".join(f"{k}={v}" for k, v in sorted(r["metrics"].items()))
    return (
        f"dataset version: {r['dataset_ref']}\n  folder: {r['dataset_uri']}\n"
        f"model: {r['model_uri']}\n  SavedModel: {r['export_dir']}\n"
        f"  metrics: {r['metrics_file']}\n  {metrics}\n"
        f"registered model: v{r.get('registered_model')} at {r.get('registered_model_uri')}\n"
        f"gate: {r.get('gate')} ({r.get('gate_reason')})"
        + (f"\nfull log: {r['log']}" if r.get("log") else "")
    )


@click.command()
@click.option(
    "--input", "input_uri", required=True, help="Raw data: file, folder, glob, gs:// or s3://."
)
@click.option(
    "--format",
    "input_format",
    default=ShardConfig.format,
    show_default=True,
    help="auto, csv, tsv, jsonl, parquet, images or text.",
)
@click.option("--workdir", required=True, help="Local folder standing in for the bucket.")
@click.option("--dataset-name", default=None, help="Registry name (default: from the input).")
@click.option("--label", default="", help="Label column (tabular).")
@click.option("--epochs", default=TrainConfig.epochs, show_default=True, type=int)
@click.option("--batch-size", default=TrainConfig.batch_size, show_default=True, type=int)
@click.option("--learning-rate", default=TrainConfig.learning_rate, show_default=True, type=float)
@click.option("--strategy", default=TrainConfig.strategy, show_default=True)
@click.option(
    "--cpu-devices",
    default=TrainConfig.cpu_devices,
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
    "--publish-mode",
    type=click.Choice(["new", "append"]),
    default="new",
    show_default=True,
    help="new: a version of exactly this input; append: the latest version's shards plus this "
    "input's, as a MINOR version (a daily run adding its day).",
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
    publish_mode: str,
    runner: str,
    as_json: bool,
) -> None:
    """Run the whole pipeline DAG locally with kfp.local.

    Shard -> version -> train -> evaluate against the stable model -> register -> promote if at
    least as good -> report.
    """
    from tfrecord_suite.kfp.local_run import run_local
    from tfrecord_suite.registry.refs import check_name
    from tfrecord_suite.shard import sources

    files = sources.resolve_inputs(input_uri)  # fail fast, with one line, before kfp starts
    if feature_config:
        import os

        from tfrecord_suite.train.features import load_feature_config

        load_feature_config(feature_config)
        if os.path.isfile(feature_config):
            feature_config = os.path.abspath(feature_config)
    sources.resolve_format(input_format, input_uri, files)
    name = check_name(dataset_name or _default_name(input_uri))
    with stdout_for(as_json):
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
            publish_mode=publish_mode,
            runner=runner,
        )
    emit(result, as_json, _run_human)


def _default_name(input_uri: str) -> str:
    import re

    base = storage.basename(storage.normalize(input_uri)).split(".")[0].lower()
    return re.sub(r"[^a-z0-9_-]", "-", base).strip("-_") or "dataset"


@click.command()
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
    from tfrecord_suite.kfp.local_run import run_local

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
        with stdout_for(as_json):
            results[name] = run_local(input_uri=path, workdir=workdir, dataset_name=name, **params)
    emit(
        results, as_json, lambda rs: "\n\n".join(f"== {n}\n{_run_human(r)}" for n, r in rs.items())
    )


@click.command("sample-data")
@click.argument("folder", default="data")
@json_option
@friendly_errors
def sample_data(folder: str, as_json: bool) -> None:
    """Write the quick start's inputs into FOLDER: a table and a folder of images.

    FOLDER/penguins.csv is the Palmer penguins table (344 rows, missing values, categorical
    columns; CC0); FOLDER/digits/<class>/ holds scikit-learn's 1,797 handwritten digits as PNG
    files, one sub-folder per class. Both come with the package's demo dependencies: nothing is
    downloaded.
    """
    from tfrecord_suite import demo_data

    penguins = demo_data.write_penguins(os.path.join(folder, "penguins.csv"))
    digits = os.path.join(folder, "digits")
    if not os.path.isdir(digits):
        demo_data.write_digits(digits)
    emit(
        {"penguins": penguins, "digits": digits},
        as_json,
        lambda r: f"table: {r['penguins']}\nimages: {r['digits']}",
    )
