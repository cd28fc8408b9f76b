"""Pipeline commands, part two: ``compile``, ``submit`` and ``retrain`` (the kfp side)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click

from tfrecord_suite.cli import options
from tfrecord_suite.cli.common import emit, friendly_errors, json_option, stdout_for
from tfrecord_suite.errors import UserError
from tfrecord_suite.kfp.compile import DEFAULT_PIPELINE


def _placement_cls() -> type:
    from tfrecord_suite.launch.placement import Placement

    return Placement


def _deployment_cls() -> type:
    from tfrecord_suite.kfp.task_placement import Deployment

    return Deployment


def _pipeline_option(fn: Callable[..., Any]) -> Any:
    from tfrecord_suite.pipelines import PIPELINES

    return click.option(
        "--pipeline",
        type=click.Choice(PIPELINES),
        default=DEFAULT_PIPELINE,
        show_default=True,
        help="The ready pipeline: retraining (raw data to a promoted model), data (raw data to "
        "a dataset version) or training (a dataset version to a promoted model).",
    )(fn)


@click.command("compile")
@click.option(
    "--output",
    default=None,
    help="Where to write the pipeline YAML  [default: pipelines/<pipeline>.yaml]",
)
@_pipeline_option
@options.dataclass_options(_placement_cls())
@options.dataclass_options(_deployment_cls())
@json_option
@friendly_errors
def compile_(output: str | None, pipeline: str, as_json: bool, **values: Any) -> None:
    """Compile the pipeline to YAML for the Kubeflow UI (needs only kfp).

    The placement flags put the train step on GPU or TPU nodes (node selector, toleration,
    accelerator limit); /dev/shm is always an in-memory volume.
    """
    from tfrecord_suite.kfp.compile import compile_pipeline
    from tfrecord_suite.pipelines import compiled_path

    path = compile_pipeline(
        output or compiled_path(pipeline),
        options.build(_placement_cls(), values),
        options.build(_deployment_cls(), values),
        pipeline,
    )
    emit({"output": path}, as_json, lambda o: f"wrote {o['output']}")


def _endpoint_cls() -> type:
    from tfrecord_suite.kfp.endpoint import KfpEndpoint

    return KfpEndpoint


def submission_options(default_experiment: str) -> Callable[[Callable[..., Any]], Any]:
    """What ``submit`` and ``retrain`` share: the endpoint, the run, and compile's flags."""

    def decorate(fn: Callable[..., Any]) -> Any:
        for option in reversed(
            [
                options.dataclass_options(_endpoint_cls()),
                click.option("--experiment", default=default_experiment, show_default=True),
                click.option(
                    "--param", "params", multiple=True, help="Pipeline parameter k=v (repeatable)."
                ),
                click.option(
                    "--pipeline-root",
                    default=None,
                    help="Artifact root for this run (gs://, s3:// or minio://); default: the "
                    "cluster's.",
                ),
                click.option("--run-name", default=None, help="Run (or recurring run) name."),
                click.option(
                    "--pipeline-name",
                    default="",
                    help="Name of the pipeline in Kubeflow; default: the ready pipeline's own "
                    "(tfrecord-suite, tfrecord-suite-data, tfrecord-suite-training).",
                ),
                click.option("--wait/--no-wait", default=False, help="Wait for the run to finish."),
                click.option(
                    "--timeout",
                    default=3600,
                    show_default=True,
                    help="Seconds to wait with --wait.",
                ),
                click.option(
                    "--service-account",
                    default="",
                    help="Kubernetes service account of the run's pods; empty (the default): the "
                    "one Kubeflow runs pipelines as (pipeline-runner, or default-editor in a "
                    "profile), which k8s/ binds the job launcher's Role to.",
                ),
                options.dataclass_options(_placement_cls()),
                options.dataclass_options(_deployment_cls()),
            ]
        ):
            fn = option(fn)
        return fn

    return decorate


def _submit(
    params: dict[str, Any],
    values: dict[str, Any],
    schedule: str | None = None,
    pipeline: str = DEFAULT_PIPELINE,
) -> dict[str, Any]:
    """Submit with the shared options' ``values`` (see :func:`submission_options`)."""
    from tfrecord_suite.kfp.submit import submit_pipeline

    return submit_pipeline(
        endpoint=options.build(_endpoint_cls(), values),
        placement=options.build(_placement_cls(), values),
        deployment=options.build(_deployment_cls(), values),
        params=params,
        schedule=schedule,
        pipeline=pipeline,
        **{k: values[k] for k in _SUBMIT_KEYS},
    )


_SUBMIT_KEYS = (
    "experiment",
    "run_name",
    "pipeline_name",
    "pipeline_root",
    "service_account",
    "wait",
    "timeout",
)


@click.command()
@submission_options("tfrecord-suite")
@_pipeline_option
@click.option(
    "--schedule",
    default=None,
    help="Cron expression with six fields, seconds first ('0 0 3 * * *'): a recurring run.",
)
@json_option
@friendly_errors
def submit(
    params: tuple[str, ...], pipeline: str, schedule: str | None, as_json: bool, **values: Any
) -> None:
    """Upload the pipeline (a new version only when it changed) and start a run or recurring run.

    The placement, image and resource flags are those of ``compile``: the uploaded version is
    compiled with them. The endpoint flags say where the API is and how to authenticate: no
    token (standalone KFP), the pod's projected service-account token (in a cluster), or a
    token file (CI, IAP, Dex).
    """
    from tfrecord_suite.kfp.submit import parse_params

    with stdout_for(as_json):  # kfp prints links to the pipeline and run
        result = _submit(parse_params(params, pipeline), values, schedule, pipeline)
    emit(result, as_json)
    if values["wait"] and result.get("state") not in (None, "SUCCEEDED"):
        sys.exit(1)


def _settings(ctx: click.Context, param: click.Parameter, path: str | None) -> str | None:
    """``--settings FILE``: the file's values become the command's defaults (flags win)."""
    if path:
        from tfrecord_suite.retrain import load_settings

        flags = {
            opt.lstrip("-"): p.name
            for p in ctx.command.params
            if isinstance(p, click.Option) and p.name not in ("settings", "as_json")
            for opt in p.opts
            if opt.startswith("--")
        }
        try:
            settings = load_settings(path, flags)
        except (UserError, OSError) as exc:
            raise click.BadParameter(str(exc), ctx, param) from None
        # the file's pipeline parameters go before those given with --param, which win
        ctx.meta["settings_params"] = settings.pop("params", [])
        ctx.default_map = {**(ctx.default_map or {}), **settings}
    return path


@click.command()
@click.option(
    "--settings",
    default=None,
    is_eager=True,
    callback=_settings,
    expose_value=False,
    help="A YAML file of this command's flags (without dashes) and the pipeline's 'params': "
    "what k8s/base/retrain.yaml holds for the CronJob and the CI workflow. Flags given on "
    "the command line win.",
)
@click.option(
    "--input", "input_uri", required=True, help="Raw data: file, folder, glob, gs:// or s3://."
)
@click.option("--registry", "registry_root", required=True, help="Dataset registry root.")
@click.option("--dataset", required=True, help="Dataset name.")
@click.option(
    "--if-changed",
    is_flag=True,
    help="Submit only when the input fingerprint differs from the latest version's.",
)
@click.option(
    "--image",
    default="",
    help="One of the suite's images (REGISTRY/tfrecord-suite:TAG[@DIGEST]): compile for its "
    "registry and tag, and its digest, instead of --image-registry and --image-tag (a digest "
    "is added to --image-digests). The CronJob passes the image it runs (k8s/images sets it), "
    "CI the one `tfrecord-suite images list --kustomization k8s/images` names.",
)
@submission_options("tfrecord-suite-retrain")
@json_option
@friendly_errors
def retrain(
    input_uri: str,
    registry_root: str,
    dataset: str,
    if_changed: bool,
    image: str,
    params: tuple[str, ...],
    as_json: bool,
    **values: Any,
) -> None:
    """Submit the pipeline for new data (from CI or a CronJob); skip unchanged data.

    Takes every flag ``submit`` takes, so the run is compiled for the same images, placement
    and endpoint as a hand-made submission; ``--settings`` reads them from one file.
    """
    from tfrecord_suite.kfp.submit import parse_params
    from tfrecord_suite.retrain import retrain as run_retrain

    if image:
        from tfrecord_suite.images import ImageSet

        chosen = ImageSet.of(image)
        digests = {**dict(ImageSet.parse_digests(values["image_digests"])), **dict(chosen.digests)}
        values = {
            **values,
            "image_registry": chosen.registry,
            "image_tag": chosen.tag,
            "image_digests": ImageSet(
                chosen.registry, chosen.tag, tuple(digests.items())
            ).digests_text,
        }
    # the settings file's pipeline parameters, then --param's (which win)
    file_params = click.get_current_context().meta.get("settings_params", [])
    with stdout_for(as_json):  # kfp prints links to the pipeline and run
        result = run_retrain(
            input_uri=input_uri,
            registry_root=registry_root,
            dataset=dataset,
            if_changed=if_changed,
            params=parse_params([*file_params, *params]),
            submit=lambda p: _submit(p, values),
        )
    emit(
        result, as_json, lambda r: ("submitted: " if r["submitted"] else "skipped: ") + r["reason"]
    )
    if values["wait"] and result.get("state") not in (None, "SUCCEEDED"):
        sys.exit(1)


@click.command("components")
@click.option(
    "--root",
    default="components",
    show_default=True,
    help="The components folder (each component's metadata.yaml is read from there).",
)
@click.option("--check", is_flag=True, help="Write nothing; exit 1 listing the stale files.")
@json_option
@friendly_errors
def components_(root: str, check: bool, as_json: bool) -> None:
    """Write each component's component.yaml and README.md, and the index (make components)."""
    from tfrecord_suite.kfp.catalog import write

    stale = write(root, check=check)
    emit(
        {"stale" if check else "written": stale},
        as_json,
        lambda r: "\n".join(next(iter(r.values()))) or "up to date",
    )
    if check and stale:
        sys.exit(1)


@click.command("release-files")
@click.option("--output", default="release", show_default=True, help="Folder to write into.")
@click.option("--image-registry", default=None, help="Registry the release pushed the images to.")
@click.option("--image-tag", default=None, help="Tag of those images.")
@json_option
@friendly_errors
def release_files_(
    output: str, image_registry: str | None, image_tag: str | None, as_json: bool
) -> None:
    """Compile every ready pipeline and component for a release's images (make release-files)."""
    from tfrecord_suite import images
    from tfrecord_suite.kfp.catalog import release_files

    chosen = images.ImageSet(
        image_registry or images.DEFAULT_REGISTRY, image_tag or images.DEFAULT_TAG
    )
    emit({"written": release_files(output, chosen)}, as_json, lambda r: "\n".join(r["written"]))
