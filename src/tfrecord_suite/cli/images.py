"""The ``images`` commands: list and build the images (the CLI of :mod:`tfrecord_suite.images`)."""

from __future__ import annotations

import sys
from typing import Any

import click

from tfrecord_suite.cli import options
from tfrecord_suite.cli.common import emit, friendly_errors, json_option, stdout_for


def _image_build_config_cls() -> type:
    from tfrecord_suite.image_build import ImageBuildConfig

    return ImageBuildConfig


@click.group("images")
def images_group() -> None:
    """Container images: list them, build and push them with the Docker SDK."""


@images_group.command("list")
@click.option("--image-registry", default=None, help="Registry (and path) of the images.")
@click.option("--image-tag", default=None, help="Tag of the images.")
@click.option(
    "--kustomization",
    default=None,
    help="A kustomize images component (k8s/images): the registry and tag it rewrites to.",
)
@click.option("--key", default=None, help="Print only this image's reference (e.g. component).")
@click.option(
    "--tag-only",
    is_flag=True,
    help="Print only the images' tag: with --kustomization, the one it deploys, which a release "
    "names (tag vTAG pushes images tagged TAG, built from package version TAG).",
)
@json_option
@friendly_errors
def images_list(
    image_registry: str | None,
    image_tag: str | None,
    kustomization: str | None,
    key: str | None,
    tag_only: bool,
    as_json: bool,
) -> None:
    """The image names and Dockerfiles (one place: tfrecord_suite/images.py)."""
    from tfrecord_suite import images

    if key and tag_only:
        raise click.UsageError("--key prints an image, --tag-only the tag: give one")

    if kustomization:
        if image_registry or image_tag:
            raise images.ImageReferenceError(
                "--kustomization names the registry and tag: drop --image-registry/--image-tag"
            )
        chosen = images.ImageSet.from_kustomization(kustomization)
    else:
        chosen = images.ImageSet(
            image_registry or images.DEFAULT_REGISTRY, image_tag or images.DEFAULT_TAG
        )
    if tag_only:
        click.echo(chosen.tag)
        return
    table = {k: {"image": ref, "dockerfile": df} for k, (ref, df) in chosen.table().items()}
    if key:
        if key not in table:
            raise images.ImageReferenceError(f"--key {key!r}: one of {', '.join(table)}")
        click.echo(table[key]["image"])
        return
    emit(
        table,
        as_json,
        lambda t: "\n".join(f"{k}: {v['image']}  ({v['dockerfile']})" for k, v in t.items()),
    )


@images_group.command("build")
@options.dataclass_options(_image_build_config_cls())
@json_option
@friendly_errors
def images_build(as_json: bool, **values: Any) -> None:
    """Build (and with --push, push) the images against the engine DOCKER_HOST names."""
    from tfrecord_suite.image_build import ImageBuildError, build_images

    try:
        with stdout_for(as_json):
            built = build_images(
                options.build(_image_build_config_cls(), values),
                progress=lambda line: click.echo(line, err=True),
            )
    except ImageBuildError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    emit(
        built,
        as_json,
        lambda b: "\n".join(
            f"{x['image']} {x['id'][:19]}{' pushed' if x['pushed'] else ''}" for x in b
        ),
    )
