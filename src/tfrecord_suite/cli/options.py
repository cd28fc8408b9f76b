"""Click options generated from a config dataclass, so CLI flags map one-to-one onto its fields.

The flags are :mod:`tfrecord_suite.flags`': ``foo_bar`` becomes ``--foo-bar`` with the field's
type, default and the help text from the dataclass's ``Attributes:`` docstring section; booleans
become ``--foo/--no-foo``; a nested config's fields are flags of their own.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Sequence
from typing import Any

import click

from tfrecord_suite import flags


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


def dataclass_options(
    cls: type, exclude: Sequence[str] = (), required: Sequence[str] = ()
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a click command with one option per dataclass field.

    A field holding a config of its own (:func:`tfrecord_suite.flags.nested`) contributes one
    option per flagged field of that config, as if they were the outer class's.
    """
    hints = typing.get_type_hints(cls)
    docs = flags.attribute_docs(cls)

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        for field in reversed(dataclasses.fields(cls)):
            if field.name in exclude:
                continue
            nested = flags.nested(field)
            if nested is not None:
                fn = dataclass_options(nested[0], exclude=nested[1])(fn)
                continue
            tp, optional = _unwrap_optional(hints[field.name])
            flag = flags.flag(field.name)
            aliases = tuple(field.metadata.get(flags.ALIASES, ()))
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

    Nested configs are built from the values of their own fields.
    """
    kwargs: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        nested = flags.nested(field)
        if nested is not None:
            inner = {f.name for f in dataclasses.fields(nested[0])} - set(nested[1])
            kwargs[field.name] = nested[0](**{k: v for k, v in values.items() if k in inner})
        elif field.name in values:
            kwargs[field.name] = values[field.name]
    return cls(**kwargs, **extra)
