"""TFDS metadata for a version, so ``tfds.builder_from_directory(<version dir>)`` can read it.

Written with TFDS's own ``DatasetInfo`` when ``tensorflow-datasets`` is installed (extra ``tfds``);
skipped with a log line otherwise. Missing tabular values stay missing in the records, so scalar
features are declared ``optional``.

TFDS finds a split's files by one name template in one folder (``{SPLIT}-{SHARD_X_OF_Y}``
relative to the metadata), while a version's shards may lie in several batches (an appended
version). So each version gets a view, ``<version>/tfds/``, of hard links named as TFDS expects:
names, not bytes. Two cases cannot be read by TFDS and get no metadata, with a log line saying
why: GZIP-compressed versions (TFDS's TFRecord adapter opens files without a compression type)
and versions on GCS (objects cannot be linked, and a template cannot point out of the folder).
"""

from __future__ import annotations

import logging
import os
from typing import Any

from tfrecord_suite.io import naming, storage
from tfrecord_suite.registry.manifest import Manifest

_LOG = logging.getLogger(__name__)
#: The version's folder of links TFDS reads through.
VIEW = "tfds"


def tfds_features(schema: dict[str, Any]) -> Any:
    """The ``tfds.features.FeaturesDict`` matching a schema dict."""
    import numpy as np
    import tensorflow_datasets as tfds

    dtypes = {"int64": np.int64, "float32": np.float32, "string": np.object_}
    feats = {}
    for f in schema["features"]:
        if f["kind"] == "image":
            feats[f["name"]] = tfds.features.Image(shape=(None, None, None))
        elif f["name"] == schema.get("label") and schema.get("label_encoding") == "index":
            feats[f["name"]] = tfds.features.ClassLabel(names=schema["label_classes"])
        elif f["kind"] == "image_raw":
            feats[f["name"]] = tfds.features.Scalar(dtype=np.object_)
        else:
            feats[f["name"]] = tfds.features.Scalar(dtype=dtypes[f["dtype"]], optional=True)
    return tfds.features.FeaturesDict(feats)


def write(version_dir: str, manifest: Manifest, shard_uris: list[str]) -> bool:
    """Write ``dataset_info.json``, ``features.json`` and the ``tfds/`` view into ``version_dir``.

    Args:
        version_dir: The version's folder.
        manifest: Its manifest.
        shard_uris: Where each of ``manifest.shards`` is, in the same order.

    Returns:
        Whether the metadata was written (False when TFDS is not installed, or cannot read this
        version: see the module docstring).

    """
    why_not = unreadable_reason(version_dir, manifest)
    if why_not:
        _LOG.info("no TFDS metadata for %s: %s", version_dir, why_not)
        return False
    try:
        import tensorflow_datasets as tfds
    except ImportError:
        _LOG.info("tensorflow-datasets not installed; no TFDS metadata for %s", version_dir)
        return False
    view = os.path.join(version_dir, VIEW)
    splits = []
    for name, info in manifest.splits.items():
        mine = sorted(
            (
                (s, uri)
                for s, uri in zip(manifest.shards, shard_uris, strict=True)
                if s["split"] == name
            ),
            key=lambda p: p[0]["index"],
        )
        for i, (_, uri) in enumerate(mine):
            storage.link_or_copy(uri, os.path.join(view, naming.shard_name(name, i, len(mine))))
        splits.append(
            tfds.core.SplitInfo(
                name=name,
                shard_lengths=[s["records"] for s, _ in mine],
                num_bytes=info["bytes"],
                filename_template=_template(version_dir, manifest, name),
            )
        )
    try:
        from tensorflow_datasets.core import dataset_info, file_adapters
        from tensorflow_datasets.core import splits as split_lib
        from tensorflow_datasets.core.utils import version as version_lib

        identity = dataset_info.DatasetIdentity(
            name=manifest.dataset,
            version=version_lib.Version(manifest.version),
            data_dir=version_dir,
            module_name="",
        )
        info = dataset_info.DatasetInfo(
            builder=identity,
            features=tfds_features(manifest.schema),
            description=f"{manifest.dataset} {manifest.version} (tfrecord-suite)",
        )
        info.set_file_format(file_adapters.FileFormat.TFRECORD)
        info.set_splits(split_lib.SplitDict(splits))
        info.write_to_directory(version_dir)
    except Exception as exc:  # TFDS's own filesystem may not reach every store
        _LOG.warning("could not write TFDS metadata into %s: %s", version_dir, exc)
        return False
    return True


def unreadable_reason(version_dir: str, manifest: Manifest) -> str:
    """Why TFDS cannot read this version ("" when it can)."""
    if manifest.gzip:
        return (
            "its shards are GZIP-compressed and TFDS's TFRecord adapter opens files without a "
            "compression type; publish without --gzip to read it with TFDS"
        )
    if storage.is_remote(version_dir):
        return (
            "in an object store the shards cannot be linked into the version's folder, where "
            "TFDS's name template looks; read it with the suite's reader"
        )
    return ""


def _template(version_dir: str, manifest: Manifest, split: str | None = None) -> Any:
    import tensorflow_datasets as tfds

    return tfds.core.ShardedFileTemplate(
        data_dir=version_dir,
        template=VIEW + "/{SPLIT}-{SHARD_X_OF_Y}.tfrecord",
        dataset_name=manifest.dataset,
        split=split,
        filetype_suffix="tfrecord",
    )
