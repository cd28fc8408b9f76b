"""Kubeflow component wrappers: no logic, each calls one plain function of the package.

The component functions live in :mod:`.data` and :mod:`.training`; :func:`build_components` makes
them kfp components on the images of an :class:`~tfrecord_suite.images.ImageSet`, so one
definition compiles for any registry and tag, and the train step for the image its hardware needs.
:data:`COMPONENTS` is the one list of them: the pipelines, the Python API
(:mod:`tfrecord_suite.components`) and ``components/<name>/`` all come from it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from kfp import dsl

from tfrecord_suite.images import DEFAULT_IMAGES, ImageSet
from tfrecord_suite.kfp.components import data, training

#: Every component function, by component name, in DAG order.
COMPONENTS: dict[str, Callable[..., Any]] = {
    "fingerprint": data.fingerprint,
    "shard": data.shard,
    "version": data.version,
    "resolve_dataset": data.resolve_dataset,
    "train": training.train,
    "evaluate": training.evaluate,
    "register": training.register,
    "promote": training.promote,
    "report": training.report,
}


@dataclasses.dataclass(frozen=True)
class Components:
    """The suite's components, each bound to its image."""

    fingerprint: Any
    shard: Any
    version: Any
    resolve_dataset: Any
    train: Any
    evaluate: Any
    register: Any
    promote: Any
    report: Any

    def __getitem__(self, name: str) -> Any:
        return getattr(self, name)


def component(fn: Callable[..., Any], image: str) -> Any:
    """``fn`` as a kfp component on ``image``, which carries the package and kfp."""
    # nothing is pip-installed when a step starts: the images hold everything
    return dsl.component(base_image=image, install_kfp_package=False)(fn)


def build_components(images: ImageSet = DEFAULT_IMAGES, train_image: str = "") -> Components:
    """Every component on ``images.component``, the train step on ``train_image`` if given."""
    image = {"train": train_image or images.component}
    return Components(
        **{
            name: component(fn, image.get(name, images.component))
            for name, fn in COMPONENTS.items()
        }
    )
