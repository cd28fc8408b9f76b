"""``components/``: every component's compiled spec and README, generated from one source.

The source of truth is the component function (its signature and docstring, compiled by kfp
into the spec with a description on every input and output), its :data:`~.steps.STEPS` policy,
and the ``metadata.yaml`` in its folder (name, stability, dependencies, tags, lastVerified, in
kubeflow/pipelines-components' shape), which is written by hand. ``make components``
(``tfrecord-suite components``) writes, for each component on the default images:

* ``components/<name>/component.yaml``: the compiled spec, for
  ``kfp.components.load_component_from_file`` or ``_from_url``;
* ``components/<name>/README.md``: what it does, its inputs and outputs with types, defaults
  and descriptions, its image, an example, its caching and idempotency;
* ``components/README.md``: the index.

``--check`` writes nothing and lists the files that differ (a test runs it).
"""

from __future__ import annotations

import dataclasses
import inspect
import io
import json
import os
import re
import tempfile
import textwrap
from typing import Any

import yaml

from tfrecord_suite import __version__
from tfrecord_suite.images import DEFAULT_IMAGES, ImageSet
from tfrecord_suite.kfp.components import COMPONENTS, build_components
from tfrecord_suite.kfp.steps import STEPS

COMPONENTS_DIR = "components"
SPEC_FILE = "component.yaml"
README_FILE = "README.md"
METADATA_FILE = "metadata.yaml"
#: Where a released component spec can be loaded from by URL.
RAW_URL = "https://raw.githubusercontent.com/tfrecord-suite/tfrecord-suite/v{version}/components"

#: What each component's README says of caching and of reruns, beyond its policy.
BEHAVIOUR = {
    "fingerprint": "Reads only the listing and the stores' checksums (local files are hashed).",
    "shard": "Each attempt writes a batch folder of its own under the dataset's `_data/`, so a "
    "retry never rewrites shards a version may already reference; batches no version "
    "references are removed by `tfrecord-suite version gc` after its grace period. The same "
    "input gives byte-identical shards on every run and runner.",
    "version": "Idempotent by content: the same shards published again return the existing "
    "version (no new number); racing publishers get one version each or the same one. The "
    "manifest is created with create-if-absent, so a crash leaves no half version.",
    "resolve_dataset": "Reads the registry only.",
    "train": "Cached on the exact version reference, its digest and the training "
    "parameters, not on an artifact every run mints anew. A killed trainer rerun with the same "
    "arguments resumes from its `backup/`; a distributed job is named after the run, so a "
    "retried step adopts its own job.",
    "evaluate": "Reads the registry's current baseline: its dataset input is a new artifact in "
    "every run, so in practice it always runs.",
    "register": "A retry of the same run returns the version its first attempt registered "
    "(keyed on the run and the model's content digest).",
    "promote": "A compare-and-swap on the alias: it fails, rather than overwrite, when the "
    "alias moved since the evaluation.",
    "report": "Writes only its own outputs.",
}


@dataclasses.dataclass(frozen=True)
class Port:
    """One input or output of a component, as its compiled spec declares it."""

    name: str
    kind: str
    default: Any
    optional: bool
    description: str
    artifact: bool


def compile_spec(name: str, images: ImageSet = DEFAULT_IMAGES) -> str:
    """The compiled spec (YAML) of component ``name`` on ``images``."""
    from kfp import compiler

    component = build_components(images)[name]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, SPEC_FILE)
        compiler.Compiler().compile(component, path)
        with open(path) as fh:
            return fh.read()


def _one_line(text: str) -> str:
    return " ".join(text.split())


def ports(spec: dict[str, Any]) -> tuple[list[Port], list[Port]]:
    """``(inputs, outputs)`` of a compiled component spec, parameters then artifacts."""
    (component,) = spec["components"].values()

    def read(section: dict[str, Any], inputs: bool) -> list[Port]:
        out = []
        for group, type_key in (("parameters", "parameterType"), ("artifacts", "artifactType")):
            for port_name, port in sorted((section.get(group) or {}).items()):
                kind = port[type_key]
                if isinstance(kind, dict):
                    kind = kind["schemaTitle"]
                out.append(
                    Port(
                        port_name,
                        kind,
                        port.get("defaultValue"),
                        bool(port.get("isOptional")) and inputs,
                        _one_line(port.get("description", "")),
                        group == "artifacts",
                    )
                )
        return out

    return (
        read(component.get("inputDefinitions", {}), True),
        read(component.get("outputDefinitions", {}), False),
    )


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _default(port: Port) -> str:
    if not port.optional:
        return "required"
    value = int(port.default) if port.kind == "NUMBER_INTEGER" else port.default
    return f"`{json.dumps(value)}`"


def _retried(retries: int) -> str:
    """How often a failed step is retried, in words."""
    if retries == 0:
        return "a failure is not retried"
    return f"a failure is retried {'once' if retries == 1 else f'up to {retries} times'}"


def render_readme(
    name: str, spec_text: str, metadata: dict[str, Any], owners: dict[str, Any]
) -> str:
    """The README of component ``name`` from its compiled spec, ``metadata.yaml`` and OWNERS."""
    spec = yaml.safe_load(spec_text)
    fn = COMPONENTS[name]
    summary, _, body = (fn.__doc__ or "").strip().partition("\n")
    body = textwrap.dedent(body).split("Args:")[0].strip()
    inputs, outputs = ports(spec)
    order = list(inspect.signature(fn).parameters)  # the function's order: required first
    inputs.sort(key=lambda p: order.index(p.name))
    outputs.sort(key=lambda p: order.index(p.name) if p.name in order else len(order))
    policy = STEPS[name]
    image = next(iter(spec["deploymentSpec"]["executors"].values()))["container"]["image"]
    out = io.StringIO()
    w = out.write
    w("<!-- generated by `make components` from the component and its metadata.yaml -->\n")
    w(f"# {name}\n\n")
    if metadata["stability"] != "stable":
        w(f"> Stability: **{metadata['stability']}**: its inputs and outputs may still change.\n\n")
    w(f"## Overview\n\n{summary.strip()}\n\n")
    if body:
        w(f"{body}\n\n")
    w("## Inputs\n\n| Parameter | Type | Default | Description |\n|---|---|---|---|\n")
    for p in inputs:
        w(f"| `{p.name}` | {p.kind} | {_default(p)} | {_cell(p.description)} |\n")
    w("\n## Outputs\n\n| Name | Type | Description |\n|---|---|---|\n")
    for p in outputs:
        w(f"| `{p.name}` | {p.kind} | {_cell(p.description)} |\n")
    w(
        f"\n## Image\n\n`{image}` (`containers/Dockerfile`), which carries the package and kfp: "
        "nothing is installed when the step starts. On your own registry: "
        "`tfrecord-suite images build --push --image-registry R --image-tag T`, then "
        "`tfrecord_suite.components.build(image_registry=R, image_tag=T)`.\n"
    )
    w(
        "\n## Use it\n\nIn your pipeline, from the released spec (or "
        "`load_component_from_file` on a checkout, or "
        f"`from tfrecord_suite.components import {name}` with the package installed):\n\n"
        "```python\n" + example(name) + "```\n"
    )
    w("\n## Caching and reruns\n\n")
    cached = "may be cached" if policy.cache else "should not be cached"
    w(
        f"In the suite's ready pipelines this step {cached} by Kubeflow, and "
        f"{_retried(policy.retries)}. {BEHAVIOUR[name]} A failure caused by its data "
        "or parameters says so (`retrying ... will not help`).\n"
    )
    if policy.pod_info:
        w(
            "\nIt reads the pipeline run's ID and its pod's name, UID and service account from "
            "environment variables that the ready pipelines set through the downward API "
            "(`tfrecord_suite.components.configure(task, ...)` does the same for your task). "
            "Without them it still runs: a distributed job is named after the model artifact's "
            "URI, a staging folder after the input's fingerprint, and the manifests and the "
            "model's lineage record no run ID.\n"
        )
    w("\n## Metadata\n\n")
    w(f"- Stability: {metadata['stability']}\n")
    for group, deps in metadata["dependencies"].items():
        listed = ", ".join(f"{d['name']} {d['version']}" for d in deps)
        w(f"- {group.replace('_', ' ').capitalize()}: {listed}\n")
    if metadata.get("tags"):
        w(f"- Tags: {', '.join(metadata['tags'])}\n")
    w(f"- Last verified: {str(metadata['lastVerified'])[:10]}\n")
    w(f"- Owners: {', '.join(owners.get('approvers', []))} (see OWNERS)\n")
    w(
        "\n## Where it differs from kubeflow/pipelines-components\n\nIt runs on the suite's image "
        "(a registry of its own, not `ghcr.io/kubeflow`) instead of installing packages when it "
        "starts (`install_kfp_package=False`); its logic lives in the `tfrecord-suite` package, "
        "and the function here only calls it; a compiled `component.yaml` is committed so that "
        "it loads by URL without the package.\n"
    )
    if metadata.get("links"):
        w("\n## Additional Resources\n\n")
        for key, url in metadata["links"].items():
            w(f"- {key.replace('_', ' ').capitalize()}: {url}\n")
    return out.getvalue()


#: What each example pipeline does with the component (the rest of the example loads the
#: components it needs and declares the pipeline). tests/unit/test_catalog.py compiles every one.
EXAMPLES = {
    "fingerprint": """
    digest = fingerprint(input_uri=input_uri)
    digest.set_caching_options(False)  # the files under one URI may change
""",
    "shard": """
    digest = fingerprint(input_uri=input_uri).set_caching_options(False)
    shard(
        input_uri=input_uri,
        registry_root=registry_root,
        dataset_name="penguins",
        fingerprint=digest.output,
        label="species",
    )
""",
    "version": """
    staged = shard(input_uri=input_uri, registry_root=registry_root, dataset_name="penguins")
    published = version(
        staged=staged.outputs["staged"], registry_root=registry_root, dataset_name="penguins"
    )
    published.set_caching_options(False)  # a cached result could name a removed version
""",
    "resolve_dataset": """
    pinned = resolve_dataset(dataset_ref=dataset_ref)  # e.g. gs://b/registry/penguins@stable
    pinned.set_caching_options(False)  # aliases move
""",
    "train": """
    pinned = resolve_dataset(dataset_ref=dataset_ref).set_caching_options(False)  # aliases move
    train(dataset_ref=pinned.outputs["ref"], dataset_digest=pinned.outputs["digest"], epochs=10)
""",
    "evaluate": """
    pinned = resolve_dataset(dataset_ref=dataset_ref).set_caching_options(False)  # aliases move
    trained = train(dataset_ref=pinned.outputs["ref"], dataset_digest=pinned.outputs["digest"])
    evaluate(dataset=pinned.outputs["dataset"], model=trained.outputs["model"])
""",
    "register": """
    pinned = resolve_dataset(dataset_ref=dataset_ref).set_caching_options(False)  # aliases move
    trained = train(dataset_ref=pinned.outputs["ref"], dataset_digest=pinned.outputs["digest"])
    scored = evaluate(dataset=pinned.outputs["dataset"], model=trained.outputs["model"])
    register(
        dataset=pinned.outputs["dataset"],
        model=trained.outputs["model"],
        evaluation=scored.outputs["evaluation"],
    ).set_caching_options(False)
""",
    "promote": """
    pinned = resolve_dataset(dataset_ref=dataset_ref).set_caching_options(False)  # aliases move
    trained = train(dataset_ref=pinned.outputs["ref"], dataset_digest=pinned.outputs["digest"])
    scored = evaluate(dataset=pinned.outputs["dataset"], model=trained.outputs["model"])
    registered = register(
        dataset=pinned.outputs["dataset"],
        model=trained.outputs["model"],
        evaluation=scored.outputs["evaluation"],
    ).set_caching_options(False)
    with dsl.If(scored.outputs["Output"] == "promote"):
        promote(
            registered=registered.outputs["registered"], evaluation=scored.outputs["evaluation"]
        ).set_caching_options(False)
""",
    "report": """
    pinned = resolve_dataset(dataset_ref=dataset_ref).set_caching_options(False)  # aliases move
    trained = train(dataset_ref=pinned.outputs["ref"], dataset_digest=pinned.outputs["digest"])
    scored = evaluate(dataset=pinned.outputs["dataset"], model=trained.outputs["model"])
    registered = register(
        dataset=pinned.outputs["dataset"],
        model=trained.outputs["model"],
        evaluation=scored.outputs["evaluation"],
    ).set_caching_options(False)
    report(
        dataset=pinned.outputs["dataset"],
        model=trained.outputs["model"],
        metrics=trained.outputs["metrics"],
        evaluation=scored.outputs["evaluation"],
        registered=registered.outputs["registered"],
    )
""",
}


def example(name: str) -> str:
    """A pipeline using component ``name``, its components loaded from the released specs."""
    body = EXAMPLES[name]
    used = [other for other in COMPONENTS if re.search(rf"\b{other}\(", body)]
    params = [f"{p}: str" for p in ("input_uri", "registry_root", "dataset_ref") if p in body]
    base = RAW_URL.format(version=__version__)
    lines = ["from kfp import components, dsl", "", f'BASE = "{base}"']
    lines += [
        f'{c} = components.load_component_from_url(f"{{BASE}}/{c}/{SPEC_FILE}")' for c in used
    ]
    lines += ["", "", "@dsl.pipeline", f"def my_pipeline({', '.join(params)}):"]
    return "\n".join(lines) + textwrap.dedent(body).replace("\n", "\n    ").rstrip(" ")


def _python_type(kind: str) -> str:
    return {"STRING": "str", "NUMBER_INTEGER": "int", "NUMBER_DOUBLE": "float",
            "BOOLEAN": "bool", "LIST": "list", "STRUCT": "dict"}.get(kind, "str")  # fmt: skip


def render_index(metadata: dict[str, dict[str, Any]]) -> str:
    """``components/README.md``: every component with its summary."""
    lines = [
        "<!-- generated by `make components` -->",
        "# Components",
        "",
        "Each folder holds one component: `component.yaml` (the compiled spec, on the default "
        "images), `README.md` (generated), `metadata.yaml`, `OWNERS` and its tests. Load one "
        "with `kfp.components.load_component_from_file` or `_from_url`, or import it: "
        "`from tfrecord_suite.components import shard`.",
        "",
        "| component | stability | what it does |",
        "|---|---|---|",
    ]
    for name, fn in COMPONENTS.items():
        summary = (fn.__doc__ or "").strip().splitlines()[0]
        stability = metadata[name]["stability"]
        lines.append(f"| [`{name}`]({name}/README.md) | {stability} | {summary} |")
    return "\n".join(lines) + "\n"


def load_metadata(root: str, name: str) -> dict[str, Any]:
    """``components/<name>/metadata.yaml``."""
    with open(os.path.join(root, name, METADATA_FILE)) as fh:
        return yaml.safe_load(fh)


def generated(root: str = COMPONENTS_DIR) -> dict[str, str]:
    """``relative path -> content`` of every generated file under ``root``."""
    files: dict[str, str] = {}
    metadata = {name: load_metadata(root, name) for name in COMPONENTS}
    for name in COMPONENTS:
        spec = compile_spec(name)
        files[os.path.join(name, SPEC_FILE)] = spec
        with open(os.path.join(root, name, "OWNERS")) as fh:
            owners = yaml.safe_load(fh)
        files[os.path.join(name, README_FILE)] = render_readme(name, spec, metadata[name], owners)
    files[README_FILE] = render_index(metadata)
    return files


def write(root: str = COMPONENTS_DIR, check: bool = False) -> list[str]:
    """Write the generated files (or, with ``check``, only compare); return those that differ."""
    from tfrecord_suite.io.generated import write_generated

    files = {os.path.join(root, rel): text for rel, text in generated(root).items()}
    return write_generated(files, check)


def release_files(output: str, images: ImageSet) -> list[str]:
    """Every ready pipeline and component compiled for ``images``, into ``output``.

    What a release attaches beside the images it pushed: ``pipeline-<name>.yaml`` and
    ``component-<name>.yaml``. Returns the paths written.
    """
    from tfrecord_suite.kfp.compile import compile_pipeline
    from tfrecord_suite.kfp.placement import Deployment
    from tfrecord_suite.pipelines import PIPELINES

    os.makedirs(output, exist_ok=True)
    written = []
    deployment = Deployment(image_registry=images.registry, image_tag=images.tag)
    for name in PIPELINES:
        path = os.path.join(output, f"pipeline-{name}.yaml")
        written.append(compile_pipeline(path, deployment=deployment, pipeline=name))
    for name in COMPONENTS:
        path = os.path.join(output, f"component-{name}.yaml")
        with open(path, "w") as fh:
            fh.write(compile_spec(name, images))
        written.append(path)
    return written
