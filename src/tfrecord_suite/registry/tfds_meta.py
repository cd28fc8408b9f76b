"""TFDS metadata for a version, so ``tfds.builder_from_directory(<version dir>)`` can read it.

Written with TFDS's own ``DatasetInfo`` when ``tensorflow-datasets`` is installed (extra ``tfds``);
skipped with a log line otherwise. Missing tabular values stay missing in the records, so scalar
features are declared ``optional``.
"""

from __future__ import annotations

import logging
from typing import Any

_LOG = logging.getLogger(__name__)


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


def write(version_dir: str, attempt: str, manifest: dict[str, Any]) -> bool:
    """Write ``dataset_info.json`` and ``features.json`` into ``version_dir``.

    Returns:
        Whether the metadata was written (False when TFDS is not installed or the folder is on
        GCS and TFDS cannot reach it).

    """
    try:
        import tensorflow_datasets as tfds
    except ImportError:
        _LOG.info("tensorflow-datasets not installed; no TFDS metadata for %s", version_dir)
        return False
    splits = []
    for name, info in manifest["splits"].items():
        shards = sorted(
            (s for s in manifest["shards"] if s["split"] == name), key=lambda s: s["index"]
        )
        splits.append(
            tfds.core.SplitInfo(
                name=name,
                shard_lengths=[s["records"] for s in shards],
                num_bytes=info["bytes"],
                filename_template=_template(version_dir, attempt, manifest, name),
            )
        )
    try:
        from tensorflow_datasets.core import dataset_info, file_adapters
        from tensorflow_datasets.core import splits as split_lib
        from tensorflow_datasets.core.utils import version as version_lib

        identity = dataset_info.DatasetIdentity(
            name=manifest["dataset"],
            version=version_lib.Version(manifest["version"]),
            data_dir=version_dir,
            module_name="",
        )
        info = dataset_info.DatasetInfo(
            builder=identity,
            features=tfds_features(manifest["schema"]),
            description=f"{manifest['dataset']} {manifest['version']} (tfrecord-suite)",
        )
        info.set_file_format(file_adapters.FileFormat.TFRECORD)
        info.set_splits(split_lib.SplitDict(splits))
        info.write_to_directory(version_dir)
    except Exception as exc:  # TFDS's own filesystem may not reach every store
        _LOG.warning("could not write TFDS metadata into %s: %s", version_dir, exc)
        return False
    return True


def _template(
    version_dir: str, attempt: str, manifest: dict[str, Any], split: str | None = None
) -> Any:
    import tensorflow_datasets as tfds

    suffix = ".gz" if manifest.get("gzip") else ""
    return tfds.core.ShardedFileTemplate(
        data_dir=version_dir,
        template=attempt + "/{SPLIT}-{SHARD_X_OF_Y}.tfrecord" + suffix,
        dataset_name=manifest["dataset"],
        split=split,
        filetype_suffix="tfrecord",
    )
