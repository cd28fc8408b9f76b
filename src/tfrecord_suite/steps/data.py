"""The data steps' bodies: fingerprint the raw input, shard it, publish a version, resolve one.

Called by the kfp wrappers of :mod:`tfrecord_suite.kfp.components.data`; kfp-free.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from tfrecord_suite.io import storage
from tfrecord_suite.podinfo import PodInfo
from tfrecord_suite.steps import final_on_bad_input, running_image, setup_logging, write_markdown
from tfrecord_suite.steps.mlmd import describe

_LOG = logging.getLogger(__name__)


def fingerprint_step(input_uri: str) -> str:
    """The digest over the names, sizes and contents of every input file."""
    from tfrecord_suite.shard import sources
    from tfrecord_suite.shard.step import input_fingerprint

    return input_fingerprint(sources.resolve_inputs(input_uri))["digest"]


def staging_uri(registry_root: str, dataset_name: str, run_key: str) -> str:
    """Where a pipeline run writes its shards: a new batch in the dataset's data folder.

    The version step then publishes them in place (the manifest is the only new object). Each
    attempt gets a folder of its own, so a retry never rewrites shards a version may already
    reference; what no version references is removed by ``version gc`` after its grace period.
    """
    import uuid

    from tfrecord_suite.registry.datasets import DATA
    from tfrecord_suite.registry.refs import check_name

    return storage.join(
        storage.normalize(registry_root),
        check_name(dataset_name),
        DATA,
        f"run-{run_key}-{uuid.uuid4().hex[:8]}",
    )


def _run_key(run_id: str, fallback: str) -> str:
    """A folder-safe key for this pipeline run (the fallback when there is no run id)."""
    import re

    key = re.sub(r"[^a-zA-Z0-9_.-]+", "-", run_id or "").strip("-.")
    return key or fallback or "run"


def shard_step(
    *,
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
    beam_args: Sequence[str],
    staged: Any,
    summary: Any,
    image_size: str = "",
    image_aspect: str = "stretch",
    image_quality: int = 90,
) -> None:
    """Shard ``input_uri`` into a staging folder under ``registry_root``; describe it.

    The shards go to :func:`staging_uri` (on the same storage as the registry, so publishing
    never crosses stores); ``staged`` records where in its metadata (``staged_uri``) and holds
    the step's ``summary.json`` and ``schema.json`` at its local path, which Kubeflow keeps.
    ``fingerprint`` (from :func:`fingerprint_step`) makes Kubeflow's cache key follow the input
    data; the step re-checks it so data that changed in between is caught, not sharded silently.
    The pipeline run (:class:`~tfrecord_suite.podinfo.PodInfo`) only names the staging folder.
    """
    from tfrecord_suite.shard.convert import parse_size
    from tfrecord_suite.shard.step import ShardConfig, ShardError, run_shard, summary_markdown
    from tfrecord_suite.shard.summary import SUMMARY_FILE

    setup_logging()
    with final_on_bad_input("shard", ShardError):
        target = staging_uri(
            registry_root, dataset_name, _run_key(PodInfo.from_env().run_id, fingerprint[:16])
        )
        if fingerprint and fingerprint_step(input_uri) != fingerprint:
            raise ShardError(
                f"input {input_uri} changed since it was fingerprinted; rerun the pipeline"
            )
        result = run_shard(
            ShardConfig(
                input=input_uri,
                output=target,
                format=input_format,
                label=label or None,
                key_column=key_column or None,
                splits=splits,
                num_shards=num_shards or None,
                target_shard_mb=target_shard_mb,
                readers=readers,
                workers=workers,
                gzip=gzip,
                max_bad_fraction=max_bad_fraction,
                overwrite=True,
                beam_args=list(beam_args),
                image_size=parse_size(image_size) if image_size else None,
                image_aspect=image_aspect,
                image_quality=image_quality,
            )
        )
    for name in (SUMMARY_FILE, "schema.json"):
        storage.copy(storage.join(target, name), storage.join(staged.path, name))
    describe(
        staged,
        {
            "staged_uri": target,
            "records": result.records,
            "bad_rows": result.bad_rows,
            "format": result.format,
            "input_digest": result.input_fingerprint["digest"],
            "splits": result.split_counts,
        },
    )
    write_markdown(summary, summary_markdown(result))


def version_step(
    *,
    staged: Any,
    registry_root: str,
    dataset_name: str,
    bump: str,
    dataset: Any,
    card: Any,
    publish_mode: str = "new",
) -> tuple[str, str]:
    """Publish the staged shards; describe the version in ``dataset``.

    The version's folder is in ``dataset.metadata["version_uri"]``; a copy of its manifest and
    card goes to ``dataset.path`` for Kubeflow to keep.

    Returns:
        The exact version reference (``<root>/<name>@<MAJOR.MINOR.PATCH>``) and content digest.

    """
    from tfrecord_suite.registry.datasets import Registry, RegistryError
    from tfrecord_suite.shard.summary import SUMMARY_FILE

    setup_logging()
    registry = Registry(registry_root)
    with final_on_bad_input("version", RegistryError):
        if publish_mode not in ("new", "append"):
            raise RegistryError(f"publish_mode {publish_mode!r}: use new or append")
        staged_uri = staged.metadata.get("staged_uri") or staged.uri
        if not storage.exists(storage.join(staged_uri, SUMMARY_FILE)):
            # Kubeflow reused a cached shard result whose batch no version kept (version gc)
            raise RegistryError(
                f"the staged shards at {staged_uri} are gone: the shard step's result was "
                "probably taken from Kubeflow's cache after `version gc` removed its data; run "
                "again with caching off (tfrecord-suite submit --no-caching, or 'enable caching' "
                "unticked in the Kubeflow UI)"
            )
        result = registry.publish(
            staged_uri,
            dataset_name,
            bump,
            producer={
                "image": running_image(),
                "pipeline_run_id": PodInfo.from_env().run_id or None,
            },
            append=publish_mode == "append",
        )
    return _describe_version(
        registry, dataset_name, result.version, result.uri, result.manifest, dataset, card,
        created=result.created,
    )  # fmt: skip


def resolve_step(*, dataset_ref: str, dataset: Any, card: Any) -> tuple[str, str]:
    """Resolve ``dataset_ref`` (an alias, a partial or an exact version); describe the version.

    ``dataset`` gets the metadata and files the version step gives the version it publishes,
    so every step downstream of either reads the same artifact.

    Returns:
        The exact version reference and the version's content digest.

    """
    from tfrecord_suite.registry.datasets import Registry, RegistryError

    setup_logging()
    with final_on_bad_input("resolve_dataset", RegistryError):
        registry, name, version = Registry.resolve_ref(dataset_ref)
    _LOG.info("%s is %s@%s", dataset_ref, name, version)
    return _describe_version(
        registry, name, str(version), registry.version_dir(name, version),
        registry.manifest(name, version), dataset, card,
    )  # fmt: skip


def _describe_version(
    registry: Any,
    name: str,
    version: str,
    uri: str,
    m: Any,
    dataset: Any,
    card: Any,
    created: bool | None = None,
) -> tuple[str, str]:
    """Describe dataset version ``name@version`` (manifest ``m``) in ``dataset`` and ``card``.

    The metadata carries the version's exact reference, folder, content digest and counts;
    ``dataset.path`` gets a copy of the manifest and the card for Kubeflow to keep.

    Returns:
        The exact version reference and the content digest.

    """
    from tfrecord_suite.registry.card import dataset_card

    ref = f"{storage.join(registry.root, name)}@{version}"
    describe(
        dataset,
        {
            "name": name,
            "version": version,
            "ref": ref,
            "version_uri": uri,
            "digest": m.content_digest,
            "created": created,  # None (left out) where this step did not publish it
            "records": m.totals["records"],
            "splits": {k: v["records"] for k, v in m.splits.items()},
            "parent": m.parent,  # None (left out) for a dataset's first version
        },
    )
    parent = registry.manifest(name, m.parent) if m.parent else None
    card_text = dataset_card(m, parent)
    write_markdown(card, card_text)
    storage.write_text(storage.join(dataset.path, "manifest.json"), m.to_json())
    storage.write_text(storage.join(dataset.path, "card.md"), card_text)
    return ref, m.content_digest
