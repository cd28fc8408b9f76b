"""Reference pages generated from the source when the site is built (mkdocs-gen-files).

Nothing here is written by hand, so the pages cannot drift from the code:

* ``reference/components/<name>.md``: each component's README (itself generated from the
  component and its metadata by ``make components``);
* ``reference/pipelines.md``: each ready pipeline's parameters and DAG, from its compiled YAML;
* ``reference/configuration.md``: every configuration dataclass, field by field, with its CLI
  flag, default and description (the docstrings the CLI's ``--help`` shows too);
* ``reference/cli.md``: every command and flag, from the click commands themselves, with the
  default each flag really has (mkdocs-click's table printed click 8.3's ``Sentinel.UNSET``
  for a flag without one, and ``_required`` for a required one).

A default that is a path in the checkout the site is built from is written as the path relative
to the checkout's root, so the site names no build machine's folders.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import re
import sys
import typing

import click
import mkdocs_gen_files
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "src"), ROOT]

from tfrecord_suite.flags import attribute_docs, nested  # noqa: E402
from tfrecord_suite.kfp.catalog import folder, relative_folder  # noqa: E402
from tfrecord_suite.kfp.components import COMPONENTS  # noqa: E402
from tfrecord_suite.pipelines import PIPELINES, compiled_path, module  # noqa: E402

#: The configuration dataclasses a user sets, where they are used.
CONFIGS = {
    "tfrecord_suite.shard.step.ShardConfig": "`tfrecord-suite shard`, the shard component",
    "tfrecord_suite.train.trainer.TrainConfig": "`tfrecord-suite train`, the train component",
    "tfrecord_suite.train.reader_config.ReaderConfig": "the reader inside TrainConfig (flat flags)",
    "tfrecord_suite.train.evaluate.GateConfig": "the evaluate component",
    "tfrecord_suite.launch.placement.Placement": "`compile`, `submit`, `retrain`: the train "
    "step's hardware",
    "tfrecord_suite.kfp.task_placement.Deployment": "`compile`, `submit`, `retrain`: images, "
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
        with open(os.path.join(folder(name, os.path.join(ROOT, "components")), "README.md")) as fh:
            text = fh.read()
        with mkdocs_gen_files.open(f"reference/components/{name}.md", "w") as out:
            out.write(text)
        mkdocs_gen_files.set_edit_path(
            f"reference/components/{name}.md",
            f"../components/{relative_folder(name)}/metadata.yaml",
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


def _shown(value: object) -> str:
    """A default as the reference shows it: code, with the build checkout's paths relative."""
    if isinstance(value, str) and os.path.isabs(value) and value.startswith(ROOT):
        rel = os.path.relpath(value, ROOT)
        return "the checkout's root" if rel == "." else f"`{rel}` in the checkout"
    if isinstance(value, str):
        return f"`{value}`" if value else '`""` (empty)'
    return f"`{value!r}`"


def _option_default(ctx: click.Context, option: click.Option) -> str:
    """What ``--help`` says of an option's default, or that it has none or is required."""
    if option.required:
        return "required"
    if isinstance(option.show_default, str):
        return option.show_default
    value = option.get_default(ctx, call=False)
    if callable(value):
        return "computed when run"
    if value is None or repr(value) == "Sentinel.UNSET" or value == ():
        return "not set"
    if option.is_flag and option.secondary_opts and isinstance(value, bool):
        return f"`{option.opts[0] if value else option.secondary_opts[0]}`"
    return _shown(value)


def _option_type(option: click.Option) -> str:
    if option.is_flag:
        return "flag"
    if isinstance(option.type, click.Choice):
        return " \\| ".join(f"`{c}`" for c in option.type.choices)
    kind = option.type.name
    return f"{kind}, repeatable" if option.multiple else kind


def _command_sections(cmd: click.Command, ctx: click.Context, names: list[str]) -> list[str]:
    """One section per command, depth first, the group's own section before its commands."""
    title = " ".join(names)
    out = [f"{'#' * min(len(names) + 1, 4)} `{title}`", ""]
    if cmd.help:
        out += [inspect.cleandoc(cmd.help).split("\f")[0].strip(), ""]
    usage = " ".join(cmd.collect_usage_pieces(ctx))
    out += ["```text", f"Usage: {title} {usage}".rstrip(), "```", ""]
    rows = []
    for param in cmd.get_params(ctx):
        if isinstance(param, click.Option) and not param.hidden:
            names_ = ", ".join(f"`{o}`" for o in param.opts)
            if param.secondary_opts:
                names_ += " / " + ", ".join(f"`{o}`" for o in param.secondary_opts)
            rows.append([names_, _option_type(param), _option_default(ctx, param),
                         param.help or ""])  # fmt: skip
    if rows:
        out += [*_table(["option", "type", "default", "description"], rows), ""]
    if isinstance(cmd, click.Group):
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                sub_ctx = click.Context(sub, info_name=name, parent=ctx)
                out += _command_sections(sub, sub_ctx, [*names, name])
    return out


def cli() -> None:
    """``reference/cli.md``: every command and flag, from the command line's definitions."""
    from tfrecord_suite.cli.main import main

    out = ["# Command line", "",
           "Every command and flag, generated from the command line's own definitions (the "
           "same text `--help` shows). The flags of `shard`, `train`, `compile`, `submit`, "
           "`retrain` and `images build` come from configuration dataclasses, one flag per "
           "field: see [Configuration](configuration.md).", ""]  # fmt: skip
    ctx = click.Context(main, info_name="tfrecord-suite")
    out += _command_sections(main, ctx, ["tfrecord-suite"])
    with mkdocs_gen_files.open("reference/cli.md", "w") as fh:
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
            if nested(field) is not None:
                rows.append([f"`{field.name}`", type_name, "see below",
                             "its fields are flags of their own (see below)"])  # fmt: skip
                continue
            if field.default is not dataclasses.MISSING:
                default = _shown(field.default)
            elif field.default_factory is not dataclasses.MISSING:
                default = _shown(field.default_factory())
            else:
                default = "required"
            flag = "--" + field.name.replace("_", "-")
            rows.append([f"`{flag}`", type_name, default, docs.get(field.name, "")])
        out += [*_table(["field / flag", "type", "default", "description"], rows), ""]
    with mkdocs_gen_files.open("reference/configuration.md", "w") as fh:
        fh.write("\n".join(out))


components()
pipelines()
configuration()
cli()
