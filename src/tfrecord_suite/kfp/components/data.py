"""Kubeflow components of the data side: fingerprint, shard, version, resolve_dataset.

Lightweight Python component functions: each body imports one function of
:mod:`tfrecord_suite.steps.data` and calls it, nothing else (``components/*/tests`` check it).
:func:`tfrecord_suite.kfp.components.build_components` turns them into kfp components on the
image set being compiled for. Their docstrings are the components' documentation: kfp compiles
the ``Args`` and ``Returns`` sections into each input's and output's description, and
``make components`` writes ``components/<category>/<name>/README.md`` from the compiled spec.
"""

from typing import NamedTuple

from kfp.dsl import Dataset, Input, Markdown, Output


def fingerprint(input_uri: str) -> str:
    """Digest the raw input: the names, sizes and contents of every file it lists.

    Never cache this step: the files under the same URI may change. Its output makes the cache
    key of the shard step that takes it follow the data, not only the URI.

    Args:
        input_uri: Raw data: a file, a folder, a glob, or a gs:// or s3:// prefix.

    Returns:
        Output: The sha256 digest (hex) over every file's name, size and content checksum
            (GCS's MD5 or CRC32C, a sha256 of local files).

    """
    from tfrecord_suite.steps.data import fingerprint_step

    return fingerprint_step(input_uri)


def shard(
    input_uri: str,
    registry_root: str,
    dataset_name: str,
    staged: Output[Dataset],
    summary: Output[Markdown],
    fingerprint: str = "",
    input_format: str = "auto",
    label: str = "",
    key_column: str = "",
    splits: str = "train=80,validation=10,test=10",
    num_shards: int = 0,
    target_shard_mb: float = 128.0,
    readers: int = 1,
    workers: int = 1,
    gzip: bool = False,
    max_bad_fraction: float = 0.01,
    beam_args: list = [],  # noqa: B006 - kfp takes the default from the signature
    image_size: str = "",
    image_aspect: str = "stretch",
    image_quality: int = 90,
):
    """Shard raw rows into tf.train.Example TFRecord files with Apache Beam, on any runner.

    The shards are written as a new batch under the dataset's folder in the registry
    (<registry_root>/<dataset_name>/_data/run-...), where the version step publishes them in
    place. Bad rows go to dead-letter files beside them; the step fails only past
    max_bad_fraction, after writing the good records.

    Args:
        input_uri: Raw data: a CSV/TSV, JSON-lines, Parquet or text file, an image folder
            (one sub-folder per class), a glob, or a gs:// or s3:// prefix.
        registry_root: Dataset registry root (a folder, or a gs:// or s3:// prefix on a
            cluster).
        dataset_name: Dataset name in the registry.
        fingerprint: The fingerprint step's digest of input_uri; the step refuses input that
            changed since, and Kubeflow's cache key then follows the data. Empty: not checked.
        input_format: auto, csv, tsv, jsonl, parquet, images or text.
        label: Label column (tabular data); detected when empty.
        key_column: Column whose hash picks each row's split; the row's content when empty.
        splits: Split names and weights, e.g. train=80,validation=10,test=10.
        num_shards: Shards per split; 0 plans them from the data size and target_shard_mb.
        target_shard_mb: Preferred shard size in MiB.
        readers: Hosts that will read the data in parallel (the shard plan gives each enough
            files).
        workers: Training workers; the shard count is a multiple of it.
        gzip: Compress the shards (GZIP).
        max_bad_fraction: Fail the step when more than this share of the rows is bad.
        beam_args: Extra Beam pipeline options, e.g. ["--runner=DataflowRunner",
            "--project=p", "--region=r", "--temp_location=gs://b/tmp"].
        image_size: HEIGHTxWIDTH images are resized to while sharding, so that training
            decodes no pixel it then throws away (e.g. 224x224); empty: stored as they are.
        image_aspect: With image_size: stretch (each side to its length) or crop (keep the
            aspect ratio, cover the size, keep the central window).
        image_quality: JPEG quality (1-100) of the JPEG images image_size re-encodes.

    Returns:
        staged: The staged shards: summary.json and schema.json at its path; metadata
            staged_uri (where the shards are), records, bad_rows, format, input_digest, splits.
        summary: The shard summary (counts, shard sizes, statistics) as Markdown.

    """
    from tfrecord_suite.steps.data import shard_step

    shard_step(
        input_uri=input_uri,
        registry_root=registry_root,
        dataset_name=dataset_name,
        fingerprint=fingerprint,
        input_format=input_format,
        label=label,
        key_column=key_column,
        splits=splits,
        num_shards=num_shards,
        target_shard_mb=target_shard_mb,
        readers=readers,
        workers=workers,
        gzip=gzip,
        max_bad_fraction=max_bad_fraction,
        beam_args=beam_args,
        image_size=image_size,
        image_aspect=image_aspect,
        image_quality=image_quality,
        staged=staged,
        summary=summary,
    )


def version(
    staged: Input[Dataset],
    registry_root: str,
    dataset_name: str,
    dataset: Output[Dataset],
    card: Output[Markdown],
    bump: str = "auto",
    publish_mode: str = "new",
) -> NamedTuple("VersionOutputs", [("ref", str), ("digest", str)]):
    """Publish staged shards as an immutable, checksummed dataset version (MAJOR.MINOR.PATCH).

    Idempotent: publishing the same content again returns the existing version. Do not cache
    this step (a cached result could name a version removed by `version gc` since).

    Args:
        staged: The shard step's staged shards.
        registry_root: Dataset registry root; the same as the shard step's.
        dataset_name: Dataset name in the registry.
        bump: auto (from the difference to the latest version), major, minor or patch.
        publish_mode: new (a version of exactly these shards) or append (the latest version's
            shards, referenced, plus these: a MINOR version).

    Returns:
        dataset: The published version: manifest.json and card.md at its path; metadata name,
            version, ref (exact reference), version_uri, digest (content digest), records,
            splits (records per split), created, parent (absent for a first version).
        card: The dataset card as Markdown.
        ref: The exact version reference, <registry_root>/<dataset_name>@<MAJOR.MINOR.PATCH>.
        digest: The version's content digest; a step keyed on ref and digest is cached on the
            data itself.

    """
    from collections import namedtuple

    from tfrecord_suite.steps.data import version_step

    ref, digest = version_step(
        staged=staged,
        registry_root=registry_root,
        dataset_name=dataset_name,
        bump=bump,
        publish_mode=publish_mode,
        dataset=dataset,
        card=card,
    )
    return namedtuple("VersionOutputs", ["ref", "digest"])(ref, digest)


def resolve_dataset(
    dataset_ref: str,
    dataset: Output[Dataset],
    card: Output[Markdown],
) -> NamedTuple("ResolveOutputs", [("ref", str), ("digest", str)]):
    """Resolve a dataset reference (an alias, a partial or exact version) to the exact version.

    Lets a pipeline train on a version another pipeline or team published. Do not cache this
    step: an alias such as stable or latest moves.

    Args:
        dataset_ref: <registry root>/<dataset>@<selector>, the selector an exact version
            (1.2.0), a partial one (1, 1.2) or an alias (latest, stable, ...).

    Returns:
        dataset: The version, described as the version step describes the one it publishes:
            manifest.json and card.md at its path; metadata name, version, ref, version_uri,
            digest, records, splits, parent (absent for a first version).
        card: The dataset card as Markdown.
        ref: The exact version reference, <registry root>/<dataset>@<MAJOR.MINOR.PATCH>.
        digest: The version's content digest.

    """
    from collections import namedtuple

    from tfrecord_suite.steps.data import resolve_step

    ref, digest = resolve_step(dataset_ref=dataset_ref, dataset=dataset, card=card)
    return namedtuple("ResolveOutputs", ["ref", "digest"])(ref, digest)
