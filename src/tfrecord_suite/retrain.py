"""CI- or schedule-triggered retraining: submit the pipeline only when the raw data changed.

kfp-free: the caller (``tfrecord-suite retrain``) passes the submission, which
:mod:`tfrecord_suite.kfp.submit` makes with ``kfp.Client``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from tfrecord_suite.io import storage

_LOG = logging.getLogger(__name__)


def input_changed(input_uri: str, registry_root: str, dataset: str) -> tuple[bool, str]:
    """Whether ``input_uri`` differs from what the latest version of ``dataset`` was built from.

    Compares the input fingerprint (names, sizes and contents of every file: GCS's MD5 or CRC32C,
    a sha256 locally) with the one in the latest version's manifest, so uploading the same files
    again is no change.

    Returns:
        ``(changed, reason)``.

    """
    from tfrecord_suite.registry.datasets import Registry
    from tfrecord_suite.shard import sources
    from tfrecord_suite.shard.step import input_fingerprint

    current = input_fingerprint(sources.resolve_inputs(input_uri))["digest"]
    reg = Registry(registry_root)
    latest = reg.latest(dataset)
    if latest is None:
        return True, f"{dataset} has no version in {reg.root} yet"
    previous = reg.manifest(dataset, latest).input_fingerprint.get("digest")
    if previous == current:
        return False, f"input unchanged since {dataset}@{latest} (fingerprint {current[:12]})"
    return True, (
        f"input fingerprint {current[:12]} differs from {dataset}@{latest}'s {str(previous)[:12]}"
    )


def retrain(
    *,
    input_uri: str,
    registry_root: str,
    dataset: str,
    if_changed: bool,
    params: dict[str, Any],
    submit: Callable[[dict[str, Any]], dict[str, Any]],
) -> dict[str, Any]:
    """Submit a pipeline run for ``input_uri`` (only when it changed, with ``if_changed``).

    Args:
        input_uri: The raw data.
        registry_root: The dataset registry.
        dataset: Dataset name.
        if_changed: Skip the submission when the input fingerprint matches the latest version.
        params: Other pipeline parameters.
        submit: Called with the full parameter dict; returns the submission's summary.

    """
    changed, reason = input_changed(input_uri, registry_root, dataset)
    _LOG.info(reason)
    if if_changed and not changed:
        return {"submitted": False, "reason": reason}
    normalized = input_uri if storage.is_remote(input_uri) else storage.normalize(input_uri)
    full = {
        **params,
        "input_uri": normalized,
        "registry_root": registry_root,
        "dataset_name": dataset,
    }
    return {"submitted": True, "reason": reason, **submit(full)}


#: The key of a settings file holding the pipeline's parameters (a mapping).
PARAMS_KEY = "params"


def load_settings(path: str, flags: dict[str, str]) -> dict[str, Any]:
    """A retraining settings file as ``{parameter name: value}`` of the command's options.

    The file (YAML, local or ``gs://``) is the one place a deployment's retraining is written:
    every key is a flag of ``tfrecord-suite retrain`` without its dashes (``accelerator-type``
    or ``accelerator_type``), and ``params`` maps pipeline parameters to values. The CronJob
    (from a ConfigMap of ``k8s/base/retrain.yaml``) and the CI workflow read the same file.

    Args:
        path: The file.
        flags: ``flag name -> option name`` of the command (``input -> input_uri``...).

    Returns:
        Option values; ``params`` as the ``name=value`` pairs ``--param`` takes.

    Raises:
        UserError: Not a mapping, a key that is no flag, or ``params`` not a mapping.

    """
    import json

    import yaml

    from tfrecord_suite.errors import UserError

    doc = yaml.safe_load(storage.read_text(path)) or {}
    if not isinstance(doc, dict):
        raise UserError(f"{path}: expected a mapping of retrain flags to values")
    out: dict[str, Any] = {}
    for key, value in doc.items():
        if key == PARAMS_KEY:
            if not isinstance(value, dict):
                raise UserError(f"{path}: params must map pipeline parameters to values")
            out["params"] = [
                f"{name}={json.dumps(v) if isinstance(v, list | bool) else v}"
                for name, v in value.items()
            ]
            continue
        name = flags.get(str(key).replace("_", "-"))
        if name is None:
            raise UserError(
                f"{path}: {key!r} is not a flag of tfrecord-suite retrain; known: "
                f"{', '.join(sorted(flags))}"
            )
        out[name] = value
    return out
