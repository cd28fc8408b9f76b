"""Click options generated from a config dataclass, so CLI flags map one-to-one onto its fields.

Each field ``foo_bar`` becomes ``--foo-bar`` with the field's type, default and the help text from
the dataclass's ``Attributes:`` docstring section; booleans become ``--foo/--no-foo``.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Callable, Sequence
from typing import Any

import click


def attribute_docs(cls: type) -> dict[str, str]:
    """``{field: description}`` from a Google-style ``Attributes:`` docstring section."""
    doc = cls.__doc__ or ""
    docs: dict[str, str] = {}
    section = doc.split("Attributes:", 1)
    if len(section) < 2:
        return docs
    current = None
    for line in section[1].splitlines():
        m = re.match(r"^\s{4,8}(\w+):\s*(.*)$", line)
        if m:
            current = m[1]
            docs[current] = m[2].strip()
        elif current and line.strip():
            docs[current] += " " + line.strip()
        elif not line.strip() and current:
            current = None
    return {k: _plain(v) for k, v in docs.items()}


def _plain(text: str) -> str:
    """Docstring markup to terminal text: ``:data:`~a.b.C``` -> ``C``, double backticks dropped."""
    text = re.sub(r":\w+:`~?(?:[\w.]+\.)?([^`]+)`", r"\1", text)
    return text.replace("``", "")


class _Size(click.ParamType):
    """``HEIGHTxWIDTH`` -> ``(height, width)``."""

    name = "HxW"

    def convert(self, value: Any, param: Any, ctx: Any) -> tuple[int, int]:
        from tfrecord_suite.errors import UserError
        from tfrecord_suite.shard.convert import parse_size

        if isinstance(value, tuple):
            return value
        try:
            return parse_size(str(value))
        except UserError as exc:
            self.fail(str(exc), param, ctx)


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


#: Field metadata key: a nested config dataclass whose fields become flat flags of the outer
#: command; its value names the nested fields that get no flag (the outer config sets them).
FLATTEN = "cli_flatten_except"


def _flattened(field: dataclasses.Field) -> tuple[type, tuple[str, ...]] | None:
    """``(nested class, its fields without a flag)`` for a flattened field, else None."""
    if FLATTEN not in field.metadata:
        return None
    return field.default_factory, tuple(field.metadata[FLATTEN])


def dataclass_options(
    cls: type, exclude: Sequence[str] = (), required: Sequence[str] = ()
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a click command with one option per dataclass field.

    A field marked with :data:`FLATTEN` metadata (a nested config) contributes one option per
    field of its own, as if they were the outer class's.
    """
    hints = typing.get_type_hints(cls)
    docs = attribute_docs(cls)

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        for field in reversed(dataclasses.fields(cls)):
            if field.name in exclude:
                continue
            nested = _flattened(field)
            if nested is not None:
                fn = dataclass_options(nested[0], exclude=nested[1])(fn)
                continue
            tp, optional = _unwrap_optional(hints[field.name])
            flag = "--" + field.name.replace("_", "-")
            # earlier names of a renamed field, so existing scripts keep working
            aliases = tuple(field.metadata.get("cli_aliases", ()))
            default = None if field.default is dataclasses.MISSING else field.default
            kwargs: dict[str, Any] = {"help": docs.get(field.name, ""), "show_default": True}
            if field.name in required or (
                field.default is dataclasses.MISSING
                and field.default_factory is dataclasses.MISSING
            ):
                kwargs["required"] = True
            if tp is bool:
                decls = [f"{f}/--no-{f[2:]}" for f in (flag, *aliases)]
                opt = click.option(*decls, field.name, default=default, **kwargs)
            elif typing.get_origin(tp) is tuple:
                opt = click.option(flag, field.name, type=_Size(), default=default, **kwargs)
            elif tp in (int, float, str):
                opt = click.option(flag, *aliases, field.name, type=tp, default=default, **kwargs)
            else:
                continue
            del optional
            fn = opt(fn)
        return fn

    return decorate


def build(cls: type, values: dict[str, Any], **extra: Any) -> Any:
    """Instantiate ``cls`` from parsed CLI values (ignoring keys that are not fields).

    Flattened nested configs are built from the values of their own fields.
    """
    kwargs: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        nested = _flattened(field)
        if nested is not None:
            inner = {f.name for f in dataclasses.fields(nested[0])} - set(nested[1])
            kwargs[field.name] = nested[0](**{k: v for k, v in values.items() if k in inner})
        elif field.name in values:
            kwargs[field.name] = values[field.name]
    return cls(**kwargs, **extra)


def to_args(obj: Any, skip: Sequence[str] = ()) -> list[str]:
    """The CLI flags that :func:`dataclass_options` would parse back into ``obj``.

    Only fields that differ from their default are written; ``None`` values are left out, and
    so are the fields named in ``skip`` (a flattened config's fields that get no flag).
    """
    args: list[str] = []
    for field in dataclasses.fields(obj):
        if field.name in skip:
            continue
        value = getattr(obj, field.name)
        nested = _flattened(field)
        if nested is not None:
            args += to_args(value, skip=nested[1])
            continue
        default = None if field.default is dataclasses.MISSING else field.default
        if value is None or (field.default is not dataclasses.MISSING and value == default):
            continue
        flag = "--" + field.name.replace("_", "-")
        if isinstance(value, bool):
            args.append(flag if value else f"--no-{flag[2:]}")
        elif isinstance(value, tuple):
            args += [flag, "x".join(str(v) for v in value)]
        else:
            args += [flag, str(value)]
    return args
