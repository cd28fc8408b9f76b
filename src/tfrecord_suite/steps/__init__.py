"""The pipeline steps' bodies: what each Kubeflow component does, as plain functions.

The kfp wrappers in :mod:`tfrecord_suite.kfp.components` hold no logic: each body imports one
function of :mod:`.data` (fingerprint, shard, version, resolve) or :mod:`.training` (train,
evaluate, register, promote, report) and calls it; this module holds what both share (logging,
the running image, bad input made final), and :mod:`.mlmd` the rule Kubeflow's launcher applies
to the artifacts' metadata. These functions never import kfp; an "artifact" is anything with
``uri``, ``path`` and a ``metadata`` dict (kfp's artifact classes, or a stand-in in tests), and
metric artifacts also need ``log_metric`` / ``log_confusion_matrix``.

Where outputs go. Everything Kubeflow keeps (summaries, reports, the dataset's manifest, the
exported model and its checkpoints) is written to ``artifact.path``: the KFP launcher maps the
artifact's URI (``gs://``, ``minio://``, ``s3://``) to that local path and uploads it to whatever
pipeline root the cluster has. Big data (staged shards, dataset versions, registered models) lives
under ``registry_root`` and the artifact's metadata says where. Artifact URIs are never changed:
the launcher honours a changed URI only inside the pipeline root's own bucket and prefix (it
derives the upload key from the URI and fails the task otherwise).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from typing import Any

from tfrecord_suite import images, tf_import
from tfrecord_suite.errors import RetryWillNotHelp
from tfrecord_suite.io import storage

_LOG = logging.getLogger(__name__)


def setup_logging() -> None:
    """Log INFO and above to stderr, as Kubeflow shows a step's log; silence TensorFlow's import."""
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    tf_import.install()  # the lines TensorFlow's import prints at any log level


def running_image() -> str:
    """The image this step runs in, as compiled into its container's environment."""
    return os.environ.get(images.IMAGE_ENV) or images.COMPONENT_IMAGE


def running_images() -> images.ImageSet:
    """The image set of this step's image: where the images it starts come from.

    A component built with ``tfrecord_suite.components.build(image_registry=R, image_tag=T)``
    starts its distributed job's nodes and tf.data service workers from ``R`` and ``T``; a step
    on an image of the user's own falls back to the default set.
    """
    return images.ImageSet.find(running_image()) or images.DEFAULT_IMAGES


@contextlib.contextmanager
def final_on_bad_input(step: str, *kinds: type[BaseException]) -> Iterator[None]:
    """Say plainly that a failure caused by the data or parameters will not pass on a retry.

    Kubeflow retries a failed step as its retry policy says; storage faults may pass, bad data
    does not, and the message says so (the original error is chained).
    """
    try:
        yield
    except (ValueError, *kinds) as exc:
        raise RetryWillNotHelp(
            f"{exc} -- bad input: retrying the {step} step will not help; fix the data or the "
            "parameters and start a new run"
        ) from exc


def write_markdown(artifact: Any, text: str) -> None:
    """Write ``text`` as the Markdown artifact's file (the UI renders it)."""
    storage.write_text(artifact.path, text)
