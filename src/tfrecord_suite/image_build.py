"""Build and push the suite's container images with the Docker SDK, against any engine.

The engine is whatever ``DOCKER_HOST`` (or ``--docker-host``) names: Docker, or podman's
Docker-compatible API (``podman system service unix:///tmp/podman.sock``). Image names and tags
come from :mod:`tfrecord_suite.images`, the same place the components take them from.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

from tfrecord_suite import images
from tfrecord_suite.errors import UserError

_LOG = logging.getLogger(__name__)
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class ImageBuildError(RuntimeError):
    """No engine is reachable, or a build or push failed (the engine's message is included)."""


@dataclasses.dataclass
class ImageBuildConfig:
    """What to build.

    Attributes:
        only: Comma-separated image keys (component, trainer-gpu, trainer-tpu, beam-worker);
            empty: all.
        image_registry: Registry (and path) the images are named under, as compile takes it.
        image_tag: Tag of the images.
        push: Push each image after building it.
        docker_host: Engine URL, e.g. unix:///var/run/docker.sock; empty: DOCKER_HOST or the
            default socket.
        context: Build context (the repository root, which the Dockerfiles expect).
        pull: Pull newer base images before building.

    """

    only: str = ""
    image_registry: str = images.DEFAULT_REGISTRY
    image_tag: str = images.DEFAULT_TAG
    push: bool = False
    docker_host: str = ""
    context: str = REPO_ROOT
    pull: bool = False

    def __post_init__(self) -> None:
        self.images  # noqa: B018 - a bad registry or tag fails here, before any engine is asked

    @property
    def images(self) -> images.ImageSet:
        """The image set named by the registry and tag (validated)."""
        return images.ImageSet(self.image_registry, self.image_tag)

    def selected(self, table: Mapping[str, tuple[str, str]]) -> dict[str, tuple[str, str]]:
        """The images to build, in table order.

        Raises:
            ValueError: An unknown key.

        """
        keys = [k.strip() for k in self.only.split(",") if k.strip()]
        unknown = [k for k in keys if k not in table]
        if unknown:
            raise UserError(f"--only: unknown image(s) {unknown}; known: {', '.join(table)}")
        return {k: v for k, v in table.items() if not keys or k in keys}


def docker_client(docker_host: str = "") -> Any:
    """A Docker SDK client for ``docker_host`` (or the environment), checked with a ping.

    Raises:
        ImageBuildError: The ``docker`` package is missing or no engine answers.

    """
    try:
        import docker
    except ImportError:
        raise ImageBuildError(
            "the docker package is missing: pip install 'tfrecord-suite[images]'"
        ) from None
    where = docker_host or os.environ.get("DOCKER_HOST") or "the default Docker socket"
    try:
        client = (
            docker.DockerClient(base_url=docker_host, timeout=600)
            if docker_host
            else docker.from_env(timeout=600)
        )
        client.ping()
    except Exception as exc:  # the SDK raises DockerException, requests and socket errors alike
        raise ImageBuildError(
            f"no container engine reachable at {where} ({type(exc).__name__}: {exc}). Start "
            "Docker, or podman's API (`podman system service unix:///tmp/podman.sock`) and set "
            "DOCKER_HOST=unix:///tmp/podman.sock"
        ) from None
    return client


def build_images(
    config: ImageBuildConfig,
    table: Mapping[str, tuple[str, str]] | None = None,
    client: Any = None,
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """Build (and with ``push``, push) the selected images.

    Args:
        config: What to build.
        table: ``key -> (image:tag, Dockerfile relative to the context)``; default: every
            image of ``config.images``.
        client: A Docker SDK client; default :func:`docker_client`.
        progress: Called with each line of build and push output (default: the log).

    Returns:
        One ``{"key", "image", "id", "pushed"}`` per image.

    Raises:
        ImageBuildError: Naming the image and the engine's error.

    """
    table = config.images.table() if table is None else table
    chosen = config.selected(table)
    client = client or docker_client(config.docker_host)
    say = progress or (lambda line: _LOG.info("%s", line))
    out = []
    for key, (ref, dockerfile) in chosen.items():
        say(f"building {ref} from {dockerfile}")
        image_id = None
        for chunk in client.api.build(
            path=config.context,
            dockerfile=dockerfile,
            tag=ref,
            buildargs={"VERSION": config.image_tag},
            rm=True,
            pull=config.pull,
            decode=True,
        ):
            if "error" in chunk:
                raise ImageBuildError(f"building {ref} ({dockerfile}) failed: {chunk['error']}")
            if chunk.get("stream", "").strip():
                say(chunk["stream"].rstrip())
            image_id = (chunk.get("aux") or {}).get("ID", image_id)
        image_id = image_id or client.images.get(ref).id
        pushed = False
        if config.push:
            repo, _, tag = ref.rpartition(":")
            say(f"pushing {ref}")
            for chunk in client.api.push(repo, tag=tag, stream=True, decode=True):
                if "error" in chunk:
                    raise ImageBuildError(f"pushing {ref} failed: {chunk['error']}")
                if chunk.get("status"):
                    say(f"{chunk.get('id', '')} {chunk['status']}".strip())
            pushed = True
        out.append({"key": key, "image": ref, "id": image_id, "pushed": pushed})
    return out
