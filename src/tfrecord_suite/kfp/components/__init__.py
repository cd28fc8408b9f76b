"""Kubeflow component wrappers: no logic, each calls one plain function of the package.

The component functions live in :mod:`.data` and :mod:`.training`; :func:`build_components` makes
them kfp components on the images of an :class:`~tfrecord_suite.images.ImageSet`, so one
definition compiles for any registry and tag, and the train step for the image its hardware needs.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from kfp import dsl

from tfrecord_suite.images import DEFAULT_IMAGES, ImageSet
from tfrecord_suite.kfp.components import data, training


@dataclasses.dataclass(frozen=True)
class Components:
    """The pipeline's components, each bound to its image."""

    fingerprint: Any
    shard: Any
    version: Any
    train: Any
    evaluate: Any
    register: Any
    promote: Any
    report: Any


def build_components(images: ImageSet = DEFAULT_IMAGES, train_image: str = "") -> Components:
    """Every component on ``images.component``, the train step on ``train_image`` if given."""

    def on(image: str, fn: Any) -> Any:
        # the images carry the package and kfp: nothing is pip-installed when a step starts
        return dsl.component(base_image=image, install_kfp_package=False)(fn)

    cpu = images.component
    return Components(
        fingerprint=on(cpu, data.fingerprint_op),
        shard=on(cpu, data.shard_op),
        version=on(cpu, data.version_op),
        train=on(train_image or cpu, training.train_op),
        evaluate=on(cpu, training.evaluate_op),
        register=on(cpu, training.register_op),
        promote=on(cpu, training.promote_op),
        report=on(cpu, training.report_op),
    )
