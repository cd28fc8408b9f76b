"""Kubeflow component wrappers: no logic, each calls one plain function of the package.

The component functions live in :mod:`.data` and :mod:`.training`; :func:`build_components` makes
them kfp components on the images of an :class:`~tfrecord_suite.images.ImageSet`, so one
definition compiles for any registry and tag, and the train step for the image its hardware needs.
:data:`COMPONENTS` is the one list of them: the pipelines, the Python API
(:mod:`tfrecord_suite.components`) and ``components/<category>/<name>/`` all come from it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from kfp import dsl

from tfrecord_suite.images import DEFAULT_IMAGES, IMAGE_ENV, ImageSet
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


#: What a step's shell runs before kfp's executor: it tells the step the image it was compiled
#: for (a task's own setting, as the ready pipelines make, wins), so that the images it starts
#: (a distributed job's nodes, tf.data service workers) come from the same registry and tag; and
#: it stops a run in a Python without the package with a message that says what is missing,
#: where kfp's executor would only say "No module named 'kfp'". kfp.local's SubprocessRunner
#: puts its virtual environment's interpreter in place of ``python3`` here too.
_CHECK = (
    "import importlib.util as u, sys; "
    'sys.exit(not all(u.find_spec(m) for m in ("kfp", "tfrecord_suite")))'
)
_MISSING = (
    "error: the {name} component runs the tfrecord-suite package and kfp, which this Python "
    "cannot import. Run it in its image, ${env} (on Kubeflow, or with kfp.local.DockerRunner), "
    "or on the host with kfp.local.SubprocessRunner(use_venv=False) from a Python that has "
    "tfrecord-suite installed (in a checkout: make, then .venv/bin/python). "
    "SubprocessRunner(use_venv=True) makes a fresh virtual environment without either."
)
_PREAMBLE = (
    'export {env}="${{{env}:-{image}}}"\n'
    f"if ! python3 -c '{_CHECK}'; then\n"
    f'  echo "{_MISSING}" >&2\n'
    "  exit 1\n"
    "fi\n"
)


def component(fn: Callable[..., Any], image: str) -> Any:
    """``fn`` as a kfp component on ``image``, which carries the package and kfp."""
    # nothing is pip-installed when a step starts: the images hold everything
    built = dsl.component(base_image=image, install_kfp_package=False)(fn)
    command = built.component_spec.implementation.container.command
    preamble = _PREAMBLE.format(env=IMAGE_ENV, image=image, name=fn.__name__)
    command[2] = preamble + command[2]  # ["sh", "-ec", script, source]
    return built


def build_components(images: ImageSet = DEFAULT_IMAGES, train_image: str = "") -> Components:
    """Every component on ``images.component``, the train step on ``train_image`` if given."""
    image = {"train": train_image or images.component}
    return Components(
        **{
            name: component(fn, image.get(name, images.component))
            for name, fn in COMPONENTS.items()
        }
    )
