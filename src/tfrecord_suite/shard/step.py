"""The shard step as one plain function: raw data in, TFRecord shards + summary out.

``run_shard`` is what the kfp component and ``tfrecord-suite shard`` call. It infers or loads the
schema, runs the Beam pipeline (any runner: extra ``beam_args`` pass straight through; when they
name none, :mod:`.runner` picks the in-process one or Prism), then moves
the shards from their temporary names into place and writes ``schema.json``, ``summary.json`` and
``summary.md`` last, so a folder with a ``summary.json`` is complete.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import logging
import re
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from tfrecord_suite.errors import UserError
from tfrecord_suite.io import naming, storage
from tfrecord_suite.markdown import code
from tfrecord_suite.schema import (
    Schema,
    SchemaError,
    _natural_key,
    infer_tabular_schema,
    schema_of_samples,
)
from tfrecord_suite.shard import convert, plan, quiet, sources
from tfrecord_suite.shard.runner import (
    check_paths_reach_runner,
    check_runner,
    runner_args,
    runs_on_this_machine,
    where_workers_run,
)
from tfrecord_suite.shard.sample import sample_columns
from tfrecord_suite.shard.summary import SUMMARY_FILE, ShardSummary

_LOG = logging.getLogger(__name__)
SCHEMA_FILE = "schema.json"
SUMMARY_MD = "summary.md"
SAMPLE_ROWS = 2000
SAMPLE_FILES = 8


class ShardError(UserError, RuntimeError):
    """The shard step failed; the message says why and what to do."""


_CREDENTIAL_OPTION = re.compile(
    r"^--?[\w.-]*(secret|password|passwd|token|access_key|key_file|connection_string|credential)",
    re.I,
)


def check_no_credentials(beam_args: Sequence[str]) -> None:
    """Refuse Beam options that carry credentials.

    Pipeline parameters show in the Kubeflow UI, the compiled run and the logs; credentials
    belong in Workload Identity (GCS, Dataflow) or a Kubernetes secret mounted into the pod.

    Raises:
        ValueError: Naming the option, never its value.

    """
    for arg in beam_args:
        name = str(arg).split("=", 1)[0]
        if _CREDENTIAL_OPTION.match(name):
            raise UserError(
                f"beam option {name} carries a credential: pipeline parameters are visible in "
                "the Kubeflow UI and logs; use Workload Identity or a mounted Kubernetes secret"
            )


@dataclasses.dataclass
class ShardConfig:
    """Everything the shard step takes.

    Attributes:
        input: A file, folder, glob or ``gs://`` / ``s3://`` prefix.
        output: Folder or ``gs://`` / ``s3://`` prefix for the shards (must be empty unless
            ``overwrite``).
        format: ``auto``, ``csv``, ``tsv``, ``jsonl``, ``parquet``, ``images`` or ``text``.
        label: Label column (tabular); auto-detected by name when None.
        key_column: Column whose value decides the split (keeps related rows together); the
            record content decides when None.
        splits: ``name=weight`` list.
        schema_file: A ``schema.json`` to use instead of inferring one.
        image_encoding: ``encoded`` (PNG/JPEG bytes) or ``raw`` (decoded pixels).
        image_size: ``(height, width)`` to resize images to while sharding, so the stored
            images (and the statistics' image_height/image_width) are the size training takes
            and the trainer decodes no more pixels than it uses. Re-encoded images are JPEG
            when the source is a JPEG (at ``image_quality``), PNG otherwise.
        image_aspect: How ``image_size`` treats the aspect ratio: ``stretch`` scales each side
            to its length (the ratio changes); ``crop`` keeps the ratio, scales to cover the
            size and keeps the central window.
        image_quality: JPEG quality (1-100) of the JPEG images re-encoded by ``image_size`` or
            ``image_channels``.
        image_channels: Force 1 or 3 channels.
        text_mode: ``line`` or ``file`` for the text format.
        encoding: Text encoding of the input.
        target_shard_mb: Preferred shard size in MiB.
        readers: Hosts that will read the data in parallel.
        workers: Training workers (shard count is a multiple of it).
        num_shards: Fixed shard count per split.
        gzip: Write GZIP-compressed shards.
        max_bad_fraction: Fail when more than this share of rows is bad (good rows are kept).
        overwrite: Replace existing output.
        shuffle: How records are grouped into shards: ``disk`` (hash buckets on local disk, in
            a folder under ``TMPDIR`` with room for the data, so memory stays flat on runners of
            one machine), ``beam`` (the runner's shuffle:
            Dataflow's, Flink's...) or ``auto`` (disk when the runner's workers run on this
            machine, see :mod:`.runner`; beam otherwise).
            The shards are byte-identical either way.
        columnar: Convert CSV/TSV, JSON lines and Parquet in Arrow batches with compiled loops
            (the same records, byte for byte, as converting them row by row); False converts
            every row in Python, as images and text always are.
        beam_args: Extra Beam pipeline options (``--runner DataflowRunner ...``). No runner
            runs on the in-process FnApiRunner, or on Prism with ``--prism_location PATH``
            (:func:`.runner.runner_args`).

    """

    input: str
    output: str
    format: str = "auto"
    label: str | None = None
    key_column: str | None = None
    splits: str = "train=80,validation=10,test=10"
    schema_file: str | None = None
    image_encoding: str = "encoded"
    image_size: tuple[int, int] | None = None
    image_aspect: str = "stretch"
    image_quality: int = 90
    image_channels: int | None = None
    text_mode: str = "line"
    encoding: str = "utf-8"
    target_shard_mb: float = plan.DEFAULT_TARGET_SHARD_BYTES / plan.MIB
    readers: int = 1
    workers: int = 1
    num_shards: int | None = None
    gzip: bool = False
    max_bad_fraction: float = 0.01
    overwrite: bool = False
    shuffle: str = "auto"
    columnar: bool = True
    beam_args: Sequence[str] = ()

    def uses_disk_shuffle(self) -> bool:
        """Whether records are grouped through local disk (see ``shuffle``)."""
        if self.shuffle == "auto":
            return runs_on_this_machine(self.beam_args)
        return self.shuffle == "disk"

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first absurd parameter."""
        sources.check_format(self.format)
        if not 0 <= self.max_bad_fraction <= 1:
            raise UserError(f"--max-bad-fraction {self.max_bad_fraction} must be within 0..1")
        if self.image_encoding not in ("encoded", "raw"):
            raise UserError("--image-encoding must be encoded or raw")
        if self.image_channels not in (None, 1, 3):
            raise UserError("--image-channels must be 1 or 3")
        if self.image_size is not None and min(self.image_size) < 1:
            raise UserError(f"--image-size {self.image_size} must be positive")
        if self.image_aspect not in convert.ASPECTS:
            raise UserError(f"--image-aspect {self.image_aspect!r}: use stretch or crop")
        if not 1 <= self.image_quality <= 100:
            raise UserError(f"--image-quality {self.image_quality} must be within 1..100")
        if self.text_mode not in ("line", "file"):
            raise UserError("--text-mode must be line or file")
        if self.target_shard_mb <= 0:
            raise UserError("--target-shard-mb must be positive")
        convert.SplitSpec.parse(self.splits)
        self.plan_config()
        check_no_credentials(self.beam_args)
        check_paths_reach_runner(self.input, self.output, self.beam_args)
        if self.shuffle not in ("auto", "disk", "beam"):
            raise UserError(f"--shuffle {self.shuffle!r}: use auto, disk or beam")
        check_runner(self.beam_args)
        where = where_workers_run(self.beam_args)
        if self.shuffle == "disk" and where is not None:
            raise UserError(
                f"--shuffle disk needs a runner on this machine; {where}: use --shuffle beam"
            )

    def plan_config(self) -> plan.ShardPlanConfig:
        """The shard plan's inputs."""
        target = int(self.target_shard_mb * plan.MIB)
        return plan.ShardPlanConfig(
            target_shard_bytes=target,
            readers=self.readers,
            workers=self.workers,
            num_shards=self.num_shards,
            min_shard_bytes=min(plan.MIN_SHARD_BYTES, target),
            max_shard_bytes=max(plan.MAX_SHARD_BYTES, target),
        )


def input_fingerprint(files: Sequence[storage.FileInfo]) -> dict[str, Any]:
    """Names, sizes and contents of every input file, and a digest over them.

    The content is GCS's MD5 (or CRC32C) of each object, or a sha256 of each local file: the
    same files uploaded again (a new generation, a new mtime) give the same fingerprint, so
    ``retrain --if-changed`` submits nothing and Kubeflow's cache still hits.
    """
    entries = [{"uri": f.uri, "size": f.size, "content": storage.content_id(f)} for f in files]
    digest = hashlib.sha256(json.dumps(entries, sort_keys=True).encode()).hexdigest()
    return {
        "files": entries,
        "num_files": len(entries),
        "total_bytes": sum(f.size for f in files),
        "digest": digest,
    }


def resolve_schema(config: ShardConfig, fmt: str, files: Sequence[storage.FileInfo]) -> Schema:
    """Load the schema file, or infer the schema from a sample of the input."""
    if config.schema_file:
        try:
            return Schema.from_json(storage.read_text(config.schema_file))
        except FileNotFoundError:
            raise ShardError(f"--schema-file {config.schema_file} does not exist") from None
    image = _image_options(config)
    if fmt == "images":
        classes = sources.image_classes(config.input, files)
        raw_shape = None
        if image.encoding == "raw":
            raw_shape = _first_image_shape(files, image)
        return convert.image_schema(classes, image, raw_shape)
    if fmt == "text":
        from tfrecord_suite.schema import Feature

        features = [Feature("text", "string", [], "text", "")]
        label, classes = None, None
        if config.text_mode == "file":
            classes = sources.image_classes(config.input, files)
            features.append(Feature("label", "string", [], "categorical", ""))
            label = "label"
        return Schema(features, label=label, label_classes=classes, source_format="text")
    read = _read_options(config, fmt)
    sampled = None
    if config.columnar:
        sampled = sample_columns(files[:SAMPLE_FILES], read, SAMPLE_ROWS)
    if sampled is not None:
        try:
            return schema_of_samples(*sampled, label=config.label, source_format=fmt)
        except SchemaError as exc:
            raise ShardError(str(exc)) from None
    # the row path's samples: JSON lines, and first rows the batch path would not read itself
    columns: list[str] = []
    sample: list[dict[str, Any]] = []
    for f in files[:SAMPLE_FILES]:
        if fmt in ("csv", "tsv"):
            cols = sources.csv_header(f.uri, read)
        elif fmt == "parquet":
            cols = sources.parquet_columns(f.uri)
        else:
            cols = []
        rows = [r for r in sources.read_rows(f.uri, read, limit=SAMPLE_ROWS) if not r.error]
        if fmt == "jsonl":
            for r in rows:
                cols.extend(k for k in r.values if k not in cols)
        for c in cols:
            if c not in columns:
                columns.append(c)
        sample.extend(r.values for r in rows)
    if not columns:
        raise ShardError(
            f"input {config.input!r} has no columns to read (empty files?); check the input"
        )
    try:
        return infer_tabular_schema(columns, sample, label=config.label, source_format=fmt)
    except SchemaError as exc:
        raise ShardError(str(exc)) from None


def _first_image_shape(files: Sequence[storage.FileInfo], image: convert.ImageOptions) -> list[int]:
    from PIL import Image

    for f in files:
        try:
            with storage.open_read(f.uri) as fh:
                img = Image.open(fh)
                img.load()
        except Exception:
            continue
        channels = image.channels or (1 if img.mode in ("L", "1", "I", "F", "I;16") else 3)
        h, w = image.size or (img.size[1], img.size[0])
        return [h, w, channels]
    raise ShardError("no decodable image found to take the raw pixel shape from")


def _image_options(config: ShardConfig) -> convert.ImageOptions:
    return convert.ImageOptions(
        encoding=config.image_encoding,
        size=tuple(config.image_size) if config.image_size else None,
        channels=config.image_channels,
        aspect=config.image_aspect,
        quality=config.image_quality,
    )


def _read_options(config: ShardConfig, fmt: str) -> sources.ReadOptions:
    return sources.ReadOptions(format=fmt, encoding=config.encoding, text_mode=config.text_mode)


@dataclasses.dataclass
class _ShardJob:
    """What the shard step resolved before running Beam: input files, format, schema, folders."""

    files: list[storage.FileInfo]
    fmt: str
    output: str
    schema: Schema
    splits: convert.SplitSpec
    temp_dir: str
    spill: Any = None
    spill_folder: Any = None


def run_shard(config: ShardConfig) -> ShardSummary:
    """Run the shard step end to end: plan -> run the Beam pipeline -> finalize.

    Returns:
        The summary (also written to ``<output>/summary.json``).

    Raises:
        sources.InputError: The input is missing, empty or of an unknown format.
        ShardError: The output is not empty, or too many rows were bad (the good records and the
            dead letters are written first).
        ValueError: A parameter is absurd.

    """
    config.validate()
    started = time.monotonic()
    job = _plan_job(config)
    try:
        metrics = _run_pipeline(config, job)
    finally:
        if job.spill_folder is not None:
            job.spill_folder.remove()
    summary = _finalize(config, job, metrics, started)
    _check_bad_rows(config, summary)
    return summary


def key_as_metadata(schema: Schema, key_column: str) -> Schema:
    """``schema`` with the key column as metadata (kind ``meta``), not a model input.

    The key (a row id) only decides each row's split; fed to a model it would be memorized, not
    learned from. It stays in every record, for joins and lookups.

    Raises:
        UserError: The key column is not a column of the input, or it is the label.

    """
    for i, f in enumerate(schema.features):
        if key_column in (f.source, f.name):
            if f.name == schema.label:
                raise UserError(f"--key-column {key_column!r} is the label; pick a row id column")
            features = list(schema.features)
            features[i] = dataclasses.replace(f, kind="meta")
            return dataclasses.replace(schema, features=features)
    columns = ", ".join(f.source or f.name for f in schema.features)
    raise UserError(f"--key-column {key_column!r} is not a column of the input ({columns})")


def _plan_job(config: ShardConfig) -> _ShardJob:
    """Resolve the input, format and schema; prepare the output and the temporary folders."""
    files = sources.resolve_inputs(config.input)  # before Beam is imported: bad input in a second
    fmt = sources.resolve_format(config.format, config.input, files)
    output = storage.normalize(config.output)
    _prepare_output(output, config.overwrite)
    schema = resolve_schema(config, fmt, files)
    splits = convert.SplitSpec.parse(config.splits)
    if config.key_column is not None:
        if fmt not in ("csv", "tsv", "jsonl", "parquet"):
            raise UserError("--key-column applies to tabular formats only")
        schema = key_as_metadata(schema, config.key_column)
    temp_dir = storage.join(output, f"{TEMP_PREFIX}{uuid.uuid4().hex[:12]}")
    storage.makedirs(temp_dir)
    _LOG.info("sharding %d %s file(s) from %s into %s", len(files), fmt, config.input, output)
    job = _ShardJob(list(files), fmt, output, schema, splits, temp_dir)
    if config.uses_disk_shuffle():
        from tfrecord_suite.io.held_folders import HeldFolder
        from tfrecord_suite.shard.spill import SPILL_PREFIX, bucket_count
        from tfrecord_suite.shard.transforms import Spill

        # serialized examples run ~2-3x their CSV size, and the plan wants ~10 files per reader
        # even for small splits: shards a bucket spans are read once per shard
        estimated_shards = max(
            32, 3 * sum(f.size for f in files) // int(config.target_shard_mb * plan.MIB)
        )
        job.spill_folder = HeldFolder.create(SPILL_PREFIX)
        job.spill = Spill(job.spill_folder.path, bucket_count(estimated_shards))
    return job


def _run_pipeline(config: ShardConfig, job: _ShardJob) -> dict[str, Any]:
    """Build and run the Beam pipeline; its counters."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from tfrecord_suite.shard.transforms import ListInputs, ShardToTFRecords

    quiet.install()
    pipeline = beam.Pipeline(options=PipelineOptions(runner_args(config.beam_args)))
    _ = (
        pipeline
        | "Input" >> beam.Create([config.input])
        | "ListInputs" >> ListInputs()
        | "ShardToTFRecords"
        >> ShardToTFRecords(
            schema=job.schema,
            read=_read_options(config, job.fmt),
            splits=job.splits,
            key_column=config.key_column,
            image=_image_options(config),
            plan_config=config.plan_config(),
            temp_dir=job.temp_dir,
            gzip=config.gzip,
            spill=job.spill,
            batches=config.columnar,
        )
    )
    result = pipeline.run()
    result.wait_until_finish()
    metrics = _beam_counters(result)
    listed = metrics.get("input_files_listed")
    if listed is not None and listed != len(job.files):
        raise ShardError(
            f"input {config.input} changed while it was sharded: {len(job.files)} files were "
            f"fingerprinted, the pipeline listed {listed}; rerun the step"
        )
    return metrics


def _finalize(
    config: ShardConfig, job: _ShardJob, metrics: dict[str, Any], started: float
) -> ShardSummary:
    """Move shards and dead letters into place; write the schema and the summary."""

    def load(name: str) -> Any:
        return json.loads(storage.read_text(storage.join(job.temp_dir, name)))

    shard_plan = load("_plan.json")
    written = {(s["split"], s["index"]): s for s in load("_shards.json")}
    stats = {k: convert.finalize_stats(v) for k, v in load("_stats.json").items()}
    dead = load("_dead_letter.json")
    bad_rows = dead["count"]
    output = job.output
    shards = _move_shards_into_place(job.temp_dir, output, shard_plan, written, config.gzip)
    dead_letter_files = _move_dead_letters_into_place(job.temp_dir, output, bad_rows)
    storage.delete_tree(job.temp_dir)

    schema = _finalize_schema(job.schema, stats)
    records = sum(s["count"] for s in stats.values())
    summary = ShardSummary(
        created=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        input=config.input,
        format=job.fmt,
        output=output,
        splits=str(job.splits),
        key_column=config.key_column,
        gzip=config.gzip,
        schema=schema.to_dict(),
        plan={"config": dataclasses.asdict(config.plan_config()), "splits": shard_plan},
        shards=shards,
        statistics=stats,
        records=records,
        bad_rows=bad_rows,
        first_bad_row=dead["first"],
        rows_read=records + bad_rows,
        dead_letter=storage.join(output, naming.DEAD_LETTER_GLOB) if bad_rows else None,
        dead_letter_files=dead_letter_files,
        input_fingerprint=input_fingerprint(job.files),
        beam_metrics=metrics,
        seconds=round(time.monotonic() - started, 3),
    )
    storage.write_text(storage.join(output, SCHEMA_FILE), schema.to_json())
    storage.write_text(storage.join(output, SUMMARY_MD), summary_markdown(summary))
    storage.write_text(storage.join(output, SUMMARY_FILE), summary.to_json())
    return summary


def _check_bad_rows(config: ShardConfig, summary: ShardSummary) -> None:
    """Fail when the input held no rows or more bad rows than ``max_bad_fraction`` allows."""
    if summary.rows_read == 0:
        raise ShardError(f"input {config.input!r} holds no rows; nothing to shard")
    bad_fraction = summary.bad_rows / summary.rows_read
    if bad_fraction > config.max_bad_fraction:
        first = summary.first_bad_row or {}
        raise ShardError(
            f"{summary.bad_rows} of {summary.rows_read} rows ({bad_fraction:.1%}) were bad, "
            f"above --max-bad-fraction {config.max_bad_fraction:g}; first: {first.get('file')} "
            f"row {first.get('row')}: {first.get('reason')}. Good records were written; see "
            f"{summary.dead_letter}"
        )


def _move_dead_letters_into_place(temp_dir: str, output: str, bad_rows: int) -> list[str]:
    """Rename Beam's dead-letter shards beside the output (or drop them when there are none)."""
    names = [
        storage.basename(f.uri)
        for f in storage.list_files(temp_dir, recursive=False)
        if naming.DEAD_LETTER_RE.match(storage.basename(f.uri))
    ]
    if not bad_rows:
        return []
    sources.beam_filesystems().rename(
        [storage.join(temp_dir, n) for n in names], [storage.join(output, n) for n in names]
    )
    return sorted(names)


def read_dead_letters(output: str) -> Iterator[dict[str, Any]]:
    """Every dead letter of a shard step's output, shard by shard (streamed, never all held)."""
    for f in storage.list_files(output, recursive=False):
        if naming.DEAD_LETTER_RE.match(storage.basename(f.uri)):
            with storage.open_read(f.uri) as fh:
                for line in fh:
                    if line.strip():
                        yield json.loads(line)


#: Folder of a run's work in progress inside its output; never part of a finished output.
TEMP_PREFIX = ".tmp-shard-"


def _is_own_partial_file(output: str, uri: str) -> bool:
    """Whether ``uri`` is a file a shard run writes before its summary (a crash leftover)."""
    rel = storage.relative_to(uri, output)
    name = storage.basename(uri)
    return (
        rel.startswith(TEMP_PREFIX)
        or naming.parse_shard_name(name) is not None
        or naming.DEAD_LETTER_RE.match(name) is not None
        or name in (SCHEMA_FILE, SUMMARY_MD)
    )


def _prepare_output(output: str, overwrite: bool) -> None:
    existing = storage.list_files(output)
    if not existing:
        return
    finished = any(storage.basename(f.uri) == SUMMARY_FILE for f in existing)
    if not finished and all(_is_own_partial_file(output, f.uri) for f in existing):
        # an earlier run of this step died before its summary: its files are not an output
        _LOG.warning(
            "output %s holds %d files of an unfinished shard run (no %s): replacing them",
            output,
            len(existing),
            SUMMARY_FILE,
        )
        storage.delete_tree(output)
        return
    if not overwrite:
        raise ShardError(
            f"output {output} is not empty ({len(existing)} files); pass --overwrite to replace it"
        )
    storage.delete_tree(output)


def _move_shards_into_place(
    temp_dir: str,
    output: str,
    shard_plan: dict[str, Any],
    written: dict[tuple[str, int], dict[str, Any]],
    gzip: bool,
) -> list[dict[str, Any]]:
    sources_, destinations, shards = [], [], []
    for split, p in shard_plan.items():
        n = p["num_shards"]
        for i in range(n):
            name = naming.shard_name(split, i, n, gzip)
            dst = storage.join(output, name)
            info = written.get((split, i))
            if info is None:
                _write_empty_shard(dst, gzip)
                info = {"records": 0, "record_bytes": 0}
            else:
                sources_.append(storage.join(temp_dir, name))
                destinations.append(dst)
            shards.append(
                {
                    "split": split,
                    "index": i,
                    "num_shards": n,
                    "path": dst,
                    "records": info["records"],
                    "record_bytes": info["record_bytes"],
                }
            )
    if sources_:
        sources.beam_filesystems().rename(sources_, destinations)
    for s in shards:
        s["bytes"] = storage.stat(s["path"]).size
    return shards


def _write_empty_shard(path: str, gzip: bool) -> None:
    import gzip as gz

    storage.write_bytes(path, gz.compress(b"", mtime=0) if gzip else b"")


def _finalize_schema(schema: Schema, stats: dict[str, Any]) -> Schema:
    """Label classes become the classes actually seen across all splits (tabular data)."""
    if schema.label is None or schema.label_encoding == "index":
        return schema
    label = schema.feature(schema.label)
    if label.dtype == "float32":
        return schema
    seen = set()
    for s in stats.values():
        seen.update(s["label_histogram"])
    classes = sorted(seen, key=_natural_key)
    return dataclasses.replace(schema, label_classes=classes or schema.label_classes)


def _beam_counters(result: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    try:
        query = result.metrics().query()
    except Exception:  # some runners do not report metrics to the launcher
        return out
    for c in query.get("counters", []):
        if c.key.metric.namespace == "tfrecord_suite.shard":
            value = c.committed if c.committed is not None else c.attempted
            out[c.key.metric.name] = out.get(c.key.metric.name, 0) + (value or 0)
    for d in query.get("distributions", []):
        if d.key.metric.namespace == "tfrecord_suite.shard":
            r = d.committed or d.attempted
            if r is not None and r.count:
                out[d.key.metric.name] = {
                    "count": r.count,
                    "mean": r.mean,
                    "min": r.min,
                    "max": r.max,
                }
    return out


def summary_markdown(summary: ShardSummary) -> str:
    """A Markdown summary for the Kubeflow UI."""
    lines = [
        f"# Shards of `{summary.input}`",
        "",
        f"{summary.records} records from {summary.rows_read} rows ({summary.format}), "
        f"{summary.bad_rows} bad rows, in {summary.seconds} s.",
        "",
        "| split | records | shards | bytes | shard plan |",
        "|---|---:|---:|---:|---|",
    ]
    for split, p in summary.plan["splits"].items():
        count = summary.statistics.get(split, {}).get("count", 0)
        size = sum(s["bytes"] for s in summary.shards if s["split"] == split)
        lines.append(
            f"| {split} | {count} | {p['num_shards']} | {size} | {'; '.join(p['reasons'])} |"
        )
    schema = summary.schema
    lines += [
        "",
        "## Features",
        "",
        "| name | dtype | kind | missing (all splits) | min | max | mean |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for f in schema["features"]:
        missing = sum(
            s["features"].get(f["name"], {}).get("missing", 0) for s in summary.statistics.values()
        )
        train = next(iter(summary.statistics.values()), {}).get("features", {}).get(f["name"], {})
        cells = [_fmt(train.get(k)) for k in ("min", "max", "mean")]
        lines.append(
            f"| {code(f['name'])} | {f['dtype']} | {f['kind']} | {missing} | {' | '.join(cells)} |"
        )
    if schema.get("label"):
        lines += ["", f"Label `{schema['label']}`, classes: {schema.get('label_classes')}"]
    if summary.bad_rows:
        lines += ["", f"Dead letters: `{summary.dead_letter}`"]
    return "\n".join(lines) + "\n"


def _fmt(v: Any) -> str:
    return "" if v is None else f"{v:.4g}"
