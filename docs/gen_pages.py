"""Reference pages generated from the source when the site is built (mkdocs-gen-files).

Nothing here is written by hand, so the pages cannot drift from the code:

* ``reference/components/<name>.md``: each component's README (itself generated from the
  component and its metadata by ``make components``);
* ``reference/pipelines.md``: each ready pipeline's parameters and DAG, from its compiled YAML;
* ``reference/configuration.md``: every configuration dataclass, field by field, with its CLI
  flag, default and description (the docstrings the CLI's ``--help`` shows too).
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
import typing

import mkdocs_gen_files
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "src"), ROOT]

from tfrecord_suite.cli.options import FLATTEN, attribute_docs  # noqa: E402
from tfrecord_suite.kfp.components import COMPONENTS  # noqa: E402
from tfrecord_suite.pipelines import PIPELINES, compiled_path, module  # noqa: E402

#: The configuration dataclasses a user sets, where they are used.
CONFIGS = {
    "tfrecord_suite.shard.step.ShardConfig": "`tfrecord-suite shard`, the shard component",
    "tfrecord_suite.train.trainer.TrainConfig": "`tfrecord-suite train`, the train component",
    "tfrecord_suite.train.reader.ReaderConfig": "the reader inside TrainConfig (flat flags)",
    "tfrecord_suite.train.evaluate.GateConfig": "the evaluate component",
    "tfrecord_suite.launch.placement.Placement": "`compile`, `submit`, `retrain`: the train "
    "step's hardware",
    "tfrecord_suite.kfp.placement.Deployment": "`compile`, `submit`, `retrain`: images, "
    "requests, caching",
    "tfrecord_suite.launch.credentials.Credentials": "inside Deployment (flat flags): the "
    "Secrets of every step and launched pod",
    "tfrecord_suite.kfp.endpoint.KfpEndpoint": "`submit`, `retrain`: the KFP API and its "
    "credentials",
    "tfrecord_suite.image_build.ImageBuildConfig": "`tfrecord-suite images build`",
}


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _table(header: list[str], rows: list[list[object]]) -> list[str]:
    """A Markdown table's lines, each cell on one line with its ``|`` escaped."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]


def components() -> None:
    """``reference/components/``: each component's README, and an index."""
    index = ["# Components", "", "Each is loadable from its `component.yaml` or importable from "
             "`tfrecord_suite.components`; the pages below are the components' own READMEs.",
             ""]  # fmt: skip
    rows = []
    for name, fn in COMPONENTS.items():
        with open(os.path.join(ROOT, "components", name, "README.md")) as fh:
            text = fh.read()
        with mkdocs_gen_files.open(f"reference/components/{name}.md", "w") as out:
            out.write(text)
        mkdocs_gen_files.set_edit_path(
            f"reference/components/{name}.md", f"../components/{name}/metadata.yaml"
        )
        summary = (fn.__doc__ or "").strip().splitlines()[0]
        rows.append([f"[{name}]({name}.md)", summary])
    index += _table(["component", "what it does"], rows)
    with mkdocs_gen_files.open("reference/components/index.md", "w") as out:
        out.write("\n".join(index) + "\n")


def dag(spec: dict) -> str:
    """A Mermaid flowchart of a compiled pipeline's tasks and their dependencies."""
    lines = ["```mermaid", "flowchart LR"]

    def walk(dag_spec: dict, prefix: str = "") -> None:
        for task, body in dag_spec.get("tasks", {}).items():
            deps = body.get("dependentTasks", [])
            comp = spec["components"][body["componentRef"]["name"]]
            if "dag" in comp:  # a condition: its tasks run only when it holds
                trigger = body.get("triggerPolicy", {}).get("condition", "")
                gate = "gate" if "promote" in trigger else task
                lines.append(f"  {task}{{{{{gate}}}}}")
                for dep in deps:
                    lines.append(f"  {dep} --> {task}")
                inner = comp["dag"]
                for sub in inner.get("tasks", {}):
                    lines.append(f"  {task} --> {sub}")
                walk(inner, prefix)
                continue
            lines.append(f"  {task}[{task}]")
            for dep in deps:
                lines.append(f"  {dep} --> {task}")

    walk(spec["root"]["dag"])
    lines.append("```")
    return "\n".join(dict.fromkeys(lines)) + "\n"


def pipelines() -> None:
    """``reference/pipelines.md``: each ready pipeline's DAG and parameters."""
    out = ["# Pipelines", "",
           "The ready pipelines, from their compiled YAML in `pipelines/` (their Python "
           "definitions sit beside it). Compile one for your images and hardware with "
           "`tfrecord-suite compile --pipeline NAME`, upload it with `tfrecord-suite submit "
           "--pipeline NAME`.", ""]  # fmt: skip
    for name in PIPELINES:
        with open(os.path.join(ROOT, compiled_path(name))) as fh:
            spec = next(yaml.safe_load_all(fh))
        params = spec["root"]["inputDefinitions"]["parameters"]
        out += [f"## {name}", "", f"Kubeflow name `{module(name).NAME}`. "
                f"{spec['pipelineInfo'].get('description', '')}", "", dag(spec)]  # fmt: skip
        rows = []
        for pname, p in params.items():
            value = p.get("defaultValue")
            if p["parameterType"] == "NUMBER_INTEGER" and value is not None:
                value = int(value)  # the compiled spec writes every number as a double
            default = f"`{value!r}`" if "defaultValue" in p else "required"
            rows.append([f"`{pname}`", p["parameterType"], default, p.get("description", "")])
        out += [*_table(["parameter", "type", "default", "description"], rows), ""]
    with mkdocs_gen_files.open("reference/pipelines.md", "w") as fh:
        fh.write("\n".join(out))


def _type_name(tp: object) -> str:
    text = getattr(tp, "__name__", None) or str(tp)
    return re.sub(r"typing\.|<class '|'>", "", text)


def configuration() -> None:
    """``reference/configuration.md``: every configuration dataclass, field by field."""
    import importlib

    out = ["# Configuration", "",
           "Every setting, as the configuration dataclass that holds it defines it: one "
           "definition for the command line (each field is a flag of the same name), the Python "
           "API and the components. Generated from the source.", ""]  # fmt: skip
    for path, where in CONFIGS.items():
        mod, _, cls_name = path.rpartition(".")
        cls = getattr(importlib.import_module(mod), cls_name)
        docs = attribute_docs(cls)
        hints = typing.get_type_hints(cls)
        out += [f"## {cls_name}", "", f"`{path}`; used by {where}.", ""]
        rows = []
        for field in dataclasses.fields(cls):
            type_name = _type_name(hints[field.name])
            if FLATTEN in field.metadata:
                rows.append([f"`{field.name}`", type_name, "",
                             "its fields are flags of their own (see below)"])  # fmt: skip
                continue
            missing = field.default is dataclasses.MISSING
            default = "required" if missing else f"`{field.default!r}`"
            flag = "--" + field.name.replace("_", "-")
            rows.append([f"`{flag}`", type_name, default, docs.get(field.name, "")])
        out += [*_table(["field / flag", "type", "default", "description"], rows), ""]
    with mkdocs_gen_files.open("reference/configuration.md", "w") as fh:
        fh.write("\n".join(out))


components()
pipelines()
configuration()
