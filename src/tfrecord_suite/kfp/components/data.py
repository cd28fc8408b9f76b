"""Kubeflow components of the data side: fingerprint, shard, version.

Lightweight Python component functions: each body imports one function of the package and calls
it. :func:`tfrecord_suite.kfp.components.build_components` turns them into kfp components on the
image set being compiled for, so ``kfp.local`` runs them in a subprocess or a container and
Kubeflow in the user's images.
"""

from typing import NamedTuple

from kfp.dsl import Dataset, Input, Markdown, Output


def fingerprint_op(input_uri: str) -> str:
    """Digest over the names, sizes and contents of every input file (never cached)."""
    from tfrecord_suite.kfp.tasks import fingerprint_task

    return fingerprint_task(input_uri)


def shard_op(
    input_uri: str,
    registry_root: str,
    dataset_name: str,
    fingerprint: str,
    input_format: str,
    label: str,
    key_column: str,
    splits: str,
    num_shards: int,
    target_shard_mb: float,
    readers: int,
    workers: int,
    gzip: bool,
    max_bad_fraction: float,
    beam_args: list,
    staged: Output[Dataset],
    summary: Output[Markdown],
):
    """Shard raw data into TFRecords with Apache Beam (any runner), staged under the registry."""
    from tfrecord_suite.kfp.tasks import shard_task

    shard_task(
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
        staged=staged,
        summary=summary,
    )


def version_op(
    staged: Input[Dataset],
    registry_root: str,
    dataset_name: str,
    bump: str,
    dataset: Output[Dataset],
    card: Output[Markdown],
    publish_mode: str = "new",
) -> NamedTuple("VersionOutputs", [("ref", str), ("digest", str)]):
    """Publish the staged shards as an immutable, checksummed dataset version.

    Returns the exact version reference and its content digest as parameters, so that the steps
    consuming them are cached on the data itself.
    """
    from collections import namedtuple

    from tfrecord_suite.kfp.tasks import version_task

    ref, digest = version_task(
        staged=staged,
        registry_root=registry_root,
        dataset_name=dataset_name,
        bump=bump,
        publish_mode=publish_mode,
        dataset=dataset,
        card=card,
    )
    return namedtuple("VersionOutputs", ["ref", "digest"])(ref, digest)
