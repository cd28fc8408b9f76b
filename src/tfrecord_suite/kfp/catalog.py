"""``components/``: every component's compiled spec and README, generated from one source.

The source of truth is the component function (its signature and docstring, compiled by kfp into
the spec with a description on every input and output), its policy (:data:`~.step_policies.STEPS`),
and the ``metadata.yaml`` and ``OWNERS`` in its folder (kubeflow/pipelines-components' shape),
written by hand. The folders are laid out as pipelines-components lays out its own,
``components/<category>/<name>/`` (:data:`CATEGORIES`), so that its tools find them. ``make
components`` (``tfrecord-suite components``) writes, for each component on the default images:

* ``component.yaml``: the compiled spec, for ``kfp.components.load_component_from_file`` or
  ``_from_url`` (what ``tfrecord_suite.components`` builds, step preamble included);
* ``component.py``: the same function under ``@dsl.component``, with its docstring laid out for
  pipelines-components' README generator (one line per input; every output documented), and
  ``example_pipelines.py``: a pipeline using it. Its tools read these two files;
* ``README.md``: first what pipelines-components' README generator writes from those files,
  ``metadata.yaml`` and ``OWNERS`` (restated here: :func:`upstream_readme`), then, after its
  ``<!-- custom-content -->`` marker (which it keeps), the suite's own sections: the compiled
  outputs and their metadata, the image, what a run on the host needs, caching and reruns;
* ``<category>/README.md``: pipelines-components' category index, and ``README.md``: ours.

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
from tfrecord_suite.flags import docstring_entries
from tfrecord_suite.images import DEFAULT_IMAGES, ImageSet
from tfrecord_suite.kfp.components import COMPONENTS, build_components
from tfrecord_suite.kfp.step_policies import STEPS

COMPONENTS_DIR = "components"
SPEC_FILE = "component.yaml"
README_FILE = "README.md"
METADATA_FILE = "metadata.yaml"
SOURCE_FILE = "component.py"
EXAMPLE_FILE = "example_pipelines.py"
#: What pipelines-components' README generator keeps of a README: everything from here on.
CUSTOM_CONTENT_MARKER = "<!-- custom-content -->"
#: Each component's category, as pipelines-components groups its own (data_processing,
#: training, evaluation, deployment): its folder is ``components/<category>/<name>/``.
CATEGORIES = {
    "fingerprint": "data_processing",
    "shard": "data_processing",
    "version": "data_processing",
    "resolve_dataset": "data_processing",
    "train": "training",
    "evaluate": "evaluation",
    "report": "evaluation",
    "register": "deployment",
    "promote": "deployment",
}
#: Where a released component spec can be loaded from by URL.
RAW_URL = "https://raw.githubusercontent.com/tfrecord-suite/tfrecord-suite/v{version}/components"


def folder(name: str, root: str = COMPONENTS_DIR) -> str:
    """Component ``name``'s folder: ``<root>/<category>/<name>``."""
    return os.path.join(root, CATEGORIES[name], name)


def relative_folder(name: str) -> str:
    """Component ``name``'s folder relative to ``components/`` (``<category>/<name>``)."""
    return f"{CATEGORIES[name]}/{name}"


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
    """The README of component ``name``: pipelines-components' part, then the suite's."""
    return (
        upstream_readme(name, metadata, owners)
        + f"\n\n{CUSTOM_CONTENT_MARKER}\n"
        + suite_sections(name, spec_text)
    )


def suite_sections(name: str, spec_text: str) -> str:
    """The README's own sections: the compiled outputs, the image, a host run, reruns."""
    spec = yaml.safe_load(spec_text)
    fn = COMPONENTS[name]
    _, outputs = ports(spec)
    order = list(inspect.signature(fn).parameters)
    outputs.sort(key=lambda p: order.index(p.name) if p.name in order else len(order))
    policy = STEPS[name]
    image = next(iter(spec["deploymentSpec"]["executors"].values()))["container"]["image"]
    out = io.StringIO()
    w = out.write
    w(
        "<!-- generated by `make components` from the component, its metadata.yaml and OWNERS; "
        "the part above is what kubeflow/pipelines-components' README generator writes -->\n"
    )
    w("\n## Outputs, as compiled\n\n| Name | Type | Description |\n|---|---|---|\n")
    for p in outputs:
        w(f"| `{p.name}` | {p.kind} | {_cell(p.description)} |\n")
    w(
        f"\n## Image\n\n`{image}` (`containers/Dockerfile`), which carries the package and kfp: "
        "nothing is installed when the step starts. On your own registry: "
        "`tfrecord-suite images build --push --image-registry R --image-tag T`, then "
        "`tfrecord_suite.components.build(image_registry=R, image_tag=T)` (the step then starts "
        "any trainers and tf.data service workers from `R` and `T` too). The example above loads "
        "the released spec; on a checkout, `load_component_from_file` on "
        f"`components/{relative_folder(name)}/{SPEC_FILE}`, or `from tfrecord_suite.components "
        f"import {name}` with the package installed.\n"
    )
    w(
        "\n## Run it on your machine\n\nOutside its image the step needs Python 3.11 with "
        "`tfrecord-suite` and its extras installed (`.[all]` from a checkout: `make venv` "
        "builds `.venv` so) and kfp's `SubprocessRunner(use_venv=False)`, run from that Python: "
        "`kfp.local.init(runner=kfp.local.SubprocessRunner(use_venv=False))`. "
        "`use_venv=True` makes a fresh virtual environment without the package, where the step "
        "stops with `error: the "
        f"{name} component runs the tfrecord-suite package and kfp, which this Python cannot "
        "import.` and what to run instead. In its image: `kfp.local.DockerRunner()` (Docker or "
        "podman's API).\n"
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
    w(
        "\n## Where it differs from kubeflow/pipelines-components\n\nIt runs on the suite's "
        "image (a registry of its own, not `ghcr.io/kubeflow`) instead of installing packages "
        "when it starts (`install_kfp_package=False`); its logic lives in the `tfrecord-suite` "
        "package, and the function only calls it; `component.py` is generated from the "
        "package's function for pipelines-components' tools, and the compiled `component.yaml` "
        "is committed so that it loads by URL without the package.\n"
    )
    return out.getvalue()


# ------------------------------------------------ what kubeflow/pipelines-components reads


def upstream_docstring(fn: Any) -> str:
    """``fn``'s docstring laid out for pipelines-components' README generator.

    Its ``docstring_parser`` keeps a description's line breaks, which would break its tables:
    here each input is on one line, each output artifact among them (kfp takes those from
    Returns), and the return value on one line.
    """
    from docstring_parser import parse

    doc = inspect.getdoc(fn) or ""
    parsed = parse(doc)
    args = {p.arg_name: " ".join((p.description or "").split()) for p in parsed.params}
    returns = docstring_entries(doc, "Returns")
    lines = [parsed.short_description or ""]
    if parsed.long_description:
        lines += ["", parsed.long_description]
    lines += ["", "Args:"]
    for param in inspect.signature(fn).parameters:
        desc = args.get(param) or "Output: " + returns.pop(param)
        lines.append(f"    {param}: {desc}")
    if returns:
        lines += ["", "Returns:"]
        if list(returns) == ["Output"]:
            lines.append(f"    Output: {returns['Output']}")
        else:
            lines.append("    Output: " + " ".join(f"{k}: {v}" for k, v in returns.items()))
    return "\n".join(lines)


def component_source(name: str, images: ImageSet = DEFAULT_IMAGES) -> str:
    """``component.py``: the component function under ``@dsl.component``.

    Its docstring is laid out by :func:`upstream_docstring`; the imports are its module's.
    """
    import ast
    import sys

    fn = COMPONENTS[name]
    module = sys.modules[fn.__module__]
    tree = ast.parse(inspect.getsource(module))
    imports = [ast.get_source_segment(inspect.getsource(module), node) for node in tree.body
               if isinstance(node, (ast.Import, ast.ImportFrom))]  # fmt: skip
    source = textwrap.dedent(inspect.getsource(fn)).splitlines()
    func = ast.parse("\n".join(source)).body[0]
    doc = func.body[0]  # the docstring's lines, replaced
    body_doc = textwrap.indent(f'"""{upstream_docstring(fn)}\n\n"""', "    ").splitlines()
    source[doc.lineno - 1 : doc.end_lineno] = [line.rstrip() for line in body_doc]
    header = (
        f'"""The {name} component for kubeflow/pipelines-components\' tools (README generation, '
        "compile checks).\n\n"
        f"Generated by `make components` from {fn.__module__}.{fn.__name__}: edit it there. "
        f"{SPEC_FILE} beside this file is what tfrecord_suite.components builds from it (the "
        "same function, with a step preamble).\n"
        '"""\n\n'
    )
    decorator = f'@dsl.component(base_image="{images.component}", install_kfp_package=False)'
    return (
        header + "\n".join([*imports, "from kfp import dsl"]) + "\n\n\n"
        + decorator + "\n" + "\n".join(source) + "\n"
    )  # fmt: skip


def example_source(name: str) -> str:
    """``example_pipelines.py``: a pipeline using component ``name`` from its released spec."""
    return (
        f'"""A pipeline using the {name} component, loaded from its released spec."""\n\n'
        + example(name)
    )


def format_title(title: str) -> str:
    """A name as pipelines-components' generator titles it (resolve_dataset: Resolve Dataset)."""
    title = re.sub(r"([a-z])([A-Z])", r"\1 \2", title).replace("_", " ").replace("-", " ")
    acronyms = ("KFP", "API", "URL", "ID", "UI", "CI", "CD")
    return " ".join(w.upper() if w.upper() in acronyms else w.capitalize() for w in title.split())


def _format_value(value: Any, depth: int = 0) -> str:
    """A metadata value as pipelines-components' generator lists it (nested Markdown lists)."""
    indent = "  " * depth
    if isinstance(value, bool):
        return "Yes" if value else "No"
    if isinstance(value, list):
        if not value:
            return "None"
        items = [
            ", ".join(f"{format_title(k)}: {v}" for k, v in item.items())
            if isinstance(item, dict)
            else str(item)
            for item in value
        ]
        return "\n" + indent + "  - " + f"\n{indent}  - ".join(items)
    if isinstance(value, dict):
        if not value:
            return "None"
        items = []
        for k, v in value.items():
            val = _format_value(v, depth + 1)
            items.append(f"{format_title(k)}:{val}" if "\n" in val else f"{format_title(k)}: {val}")
        return "\n" + indent + "  - " + f"\n{indent}  - ".join(items)
    return "None" if value is None else str(value)


def _wrap(text: str, width: int = 120) -> str:
    paragraphs = [" ".join(p.split()) for p in text.split("\n\n")]
    return "\n\n".join(
        textwrap.fill(p, width=width, break_long_words=False, break_on_hyphens=False)
        for p in paragraphs
    )


def upstream_readme(name: str, metadata: dict[str, Any], owners: dict[str, Any]) -> str:
    """What pipelines-components' README generator (``scripts/generate_readme``) writes.

    Restated from its template and its readers of ``component.py``, ``example_pipelines.py``,
    ``metadata.yaml`` and ``OWNERS``, so that the README it checks is fresh by its own rules (a
    test runs its generator where a copy of it is at hand).
    """
    import ast

    from docstring_parser import parse

    func = next(
        n for n in ast.walk(ast.parse(component_source(name))) if isinstance(n, ast.FunctionDef)
    )
    parsed = parse(ast.get_docstring(func) or "")
    overview = "\n\n".join(p for p in (parsed.short_description, parsed.long_description) if p)
    described = {p.arg_name: p.description for p in parsed.params}
    args = func.args
    defaults = [None] * (len(args.args) - len(args.defaults)) + list(args.defaults)
    lines = [f"# {format_title(metadata['name'])} \u2728", ""]
    stability = str(metadata.get("stability", "")).strip()
    if stability and stability.lower() != "stable":
        lines += [
            f"> \u26a0\ufe0f **Stability: {stability}** \u2014 This asset is not yet stable and "
            "may change.",
            "",
        ]
    lines += ["## Overview \U0001f9fe", "", _wrap(overview), ""]
    lines += ["## Inputs \U0001f4e5", "", "| Parameter | Type | Default | Description |",
              "|-----------|------|---------|-------------|"]  # fmt: skip
    for arg, node in zip(args.args, defaults, strict=True):
        value = node.value if isinstance(node, ast.Constant) else (
            ast.unparse(node) if node is not None else None
        )  # fmt: skip
        default = '`""`' if value == "" else f"`{value}`"
        lines.append(
            f"| `{arg.arg}` | `{ast.unparse(arg.annotation)}` | {default} | "
            f"{described.get(arg.arg, '')} |"
        )
    lines.append("")
    if func.returns is not None:
        lines += ["## Outputs \U0001f4e4", "", "| Name | Type | Description |",
                  "|------|------|-------------|",
                  f"| Output | `{ast.unparse(func.returns)}` | "
                  f"{parsed.returns.description if parsed.returns else ''} |", ""]  # fmt: skip
    lines += ["## Usage Examples \U0001f9ea", "", "```python", example_source(name), "```", ""]
    shown = {k: v for k, v in metadata.items() if k not in ("ci", "links")}
    if owners:
        shown["owners"] = owners
    lines += ["## Metadata \U0001f5c2\ufe0f", ""]
    lines += [f"- **{format_title(k)}**: {_format_value(v)}" for k, v in shown.items()]
    lines.append("")
    if metadata.get("links"):
        lines += ["## Additional Resources \U0001f4da", ""]
        lines += [f"- **{k.replace('_', ' ').title()}**: [{u}]({u})"
                  for k, u in metadata["links"].items()]  # fmt: skip
        lines.append("")
    # the generator's template ends in a blank line, which its line-by-line strip keeps as "\n"
    return "\n".join(line.rstrip() for line in "\n".join(lines).splitlines()) + "\n"


def category_readme(category: str, metadata: dict[str, dict[str, Any]]) -> str:
    """``components/<category>/README.md`` as pipelines-components' generator writes it."""
    title = format_title(category)
    items = sorted(
        (format_title(metadata[n]["name"]), n, (COMPONENTS[n].__doc__ or "").strip().split("\n")[0])
        for n in COMPONENTS
        if CATEGORIES[n] == category
    )
    lines = [f"# {title} Components", "",
             f"This directory contains components in the **{title}** category:", ""]  # fmt: skip
    lines += [f"- [{t}](./{n}/README.md): {overview[:120]}" for t, n, overview in items]
    return "\n".join(lines) + "\n"


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
        decision=scored.outputs["decision"],
    ).set_caching_options(False)
""",
    "promote": """
    pinned = resolve_dataset(dataset_ref=dataset_ref).set_caching_options(False)  # aliases move
    trained = train(dataset_ref=pinned.outputs["ref"], dataset_digest=pinned.outputs["digest"])
    scored = evaluate(dataset=pinned.outputs["dataset"], model=trained.outputs["model"])
    registered = register(
        dataset=pinned.outputs["dataset"],
        model=trained.outputs["model"],
        decision=scored.outputs["decision"],
    ).set_caching_options(False)
    with dsl.If(scored.outputs["Output"] == "promote"):
        promote(
            registered=registered.outputs["registered"], decision=scored.outputs["decision"]
        ).set_caching_options(False)
""",
    "report": """
    pinned = resolve_dataset(dataset_ref=dataset_ref).set_caching_options(False)  # aliases move
    trained = train(dataset_ref=pinned.outputs["ref"], dataset_digest=pinned.outputs["digest"])
    scored = evaluate(dataset=pinned.outputs["dataset"], model=trained.outputs["model"])
    registered = register(
        dataset=pinned.outputs["dataset"],
        model=trained.outputs["model"],
        decision=scored.outputs["decision"],
    ).set_caching_options(False)
    report(
        dataset=pinned.outputs["dataset"],
        model=trained.outputs["model"],
        metrics=trained.outputs["metrics"],
        decision=scored.outputs["decision"],
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
    for c in used:
        url = f'f"{{BASE}}/{relative_folder(c)}/{SPEC_FILE}"'
        line = f"{c} = components.load_component_from_url({url})"
        lines.append(line if len(line) <= 100 else line.replace("(f", "(\n    f")[:-1] + "\n)")
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
        "Grouped by category as kubeflow/pipelines-components groups its own "
        "(`<category>/<name>/`), each folder holds one component: `component.yaml` (the "
        "compiled spec, on the default images), `component.py` and `example_pipelines.py` (for "
        "pipelines-components' tools), `README.md` (all four generated), `metadata.yaml`, "
        "`OWNERS` and its tests. Load one with `kfp.components.load_component_from_file` or "
        "`_from_url`, or import it: `from tfrecord_suite.components import shard`.",
        "",
        "| component | category | stability | what it does |",
        "|---|---|---|---|",
    ]
    for name, fn in COMPONENTS.items():
        summary = (fn.__doc__ or "").strip().splitlines()[0]
        stability = metadata[name]["stability"]
        lines.append(
            f"| [`{name}`]({relative_folder(name)}/README.md) | {CATEGORIES[name]} | {stability} "
            f"| {summary} |"
        )
    return "\n".join(lines) + "\n"


def load_metadata(root: str, name: str) -> dict[str, Any]:
    """``components/<category>/<name>/metadata.yaml``."""
    with open(os.path.join(folder(name, root), METADATA_FILE)) as fh:
        return yaml.safe_load(fh)


def generated(root: str = COMPONENTS_DIR) -> dict[str, str]:
    """``relative path -> content`` of every generated file under ``root``."""
    files: dict[str, str] = {}
    metadata = {name: load_metadata(root, name) for name in COMPONENTS}
    for name in COMPONENTS:
        rel = relative_folder(name)
        spec = compile_spec(name)
        files[os.path.join(rel, SPEC_FILE)] = spec
        files[os.path.join(rel, SOURCE_FILE)] = component_source(name)
        files[os.path.join(rel, EXAMPLE_FILE)] = example_source(name)
        with open(os.path.join(folder(name, root), "OWNERS")) as fh:
            owners = yaml.safe_load(fh)
        files[os.path.join(rel, README_FILE)] = render_readme(name, spec, metadata[name], owners)
    for category in sorted(set(CATEGORIES.values())):
        files[os.path.join(category, README_FILE)] = category_readme(category, metadata)
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
    from tfrecord_suite.kfp.task_placement import Deployment
    from tfrecord_suite.pipelines import PIPELINES

    os.makedirs(output, exist_ok=True)
    written = []
    deployment = Deployment(images.registry, images.tag, images.digests_text)
    for name in PIPELINES:
        path = os.path.join(output, f"pipeline-{name}.yaml")
        written.append(compile_pipeline(path, deployment=deployment, pipeline=name))
    for name in COMPONENTS:
        path = os.path.join(output, f"component-{name}.yaml")
        with open(path, "w") as fh:
            fh.write(compile_spec(name, images))
        written.append(path)
    return written
