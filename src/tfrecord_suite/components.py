"""The suite's Kubeflow components, ready for your own pipelines.

On the default images (``ghcr.io/tfrecord-suite/*``, tagged with this package's version):

```python
from kfp import dsl
from tfrecord_suite.components import shard, train, version


@dsl.pipeline
def my_pipeline(input_uri: str, registry_root: str):
    staged = shard(input_uri=input_uri, registry_root=registry_root, dataset_name="rows")
    published = version(
        staged=staged.outputs["staged"], registry_root=registry_root, dataset_name="rows"
    )
    train(dataset_ref=published.outputs["ref"], dataset_digest=published.outputs["digest"])
```

On your own registry and tag, in one call:

```python
from tfrecord_suite.components import build

ops = build(image_registry="europe-docker.pkg.dev/acme/ml", image_tag="0.1.0")
```

``configure(task, "shard")`` gives a task the settings the suite's ready pipelines give it
(display name, retries, caching, the run id through the downward API, CPU and memory). The same
components are in ``components/<category>/<name>/component.yaml`` for
``kfp.components.load_component_from_file`` or ``_from_url``, each documented in its
``README.md``.
"""

from __future__ import annotations

import functools
from typing import Any

from tfrecord_suite.images import DEFAULT_REGISTRY, DEFAULT_TAG, ImageSet
from tfrecord_suite.kfp.components import COMPONENTS, Components, build_components
from tfrecord_suite.kfp.step_policies import configure

__all__ = ["COMPONENTS", "Components", "build", "configure", *COMPONENTS]


def build(
    image_registry: str = DEFAULT_REGISTRY, image_tag: str = DEFAULT_TAG, image_digests: str = ""
) -> Components:
    """Every component on the images of ``image_registry`` and ``image_tag``.

    Push the images there first: ``tfrecord-suite images build --push --image-registry ...
    --image-tag ...``. ``image_digests`` (``component=sha256:...``, as ``--image-digests``)
    pins images by digest: the components then run ``NAME:TAG@DIGEST``.
    """
    return build_components(
        ImageSet(image_registry, image_tag, ImageSet.parse_digests(image_digests))
    )


@functools.cache
def _default() -> Components:
    return build()


def __getattr__(name: str) -> Any:
    """``from tfrecord_suite.components import shard``: a component on the default images."""
    if name in COMPONENTS:
        return _default()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
