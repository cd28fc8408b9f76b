"""The command-line flags of a config dataclass: the one rule naming them, and writing them out.

Each field ``foo_bar`` is the flag ``--foo-bar`` (a boolean: ``--foo-bar/--no-foo-bar``), its help
text the field's entry in the dataclass's ``Attributes:`` docstring section. A field holding a
config dataclass of its own (``TrainConfig.reader``, ``Deployment.credentials``) gives one flag
per field of that config instead, as if they were the outer class's; the nested fields named in
its :data:`UNFLAGGED` metadata get none (the outer config sets them).

The command line (:mod:`tfrecord_suite.cli.options`) parses these flags into a config; the
launcher writes a config back into them (:func:`to_args`) for the nodes of a distributed job,
which run ``tfrecord-suite train`` with the step's own configuration. Neither imports the other.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Sequence
from typing import Any

#: Field metadata: earlier flag names of a renamed field, so existing scripts keep working.
ALIASES = "flag_aliases"
#: Field metadata of a nested config: the names of its fields that get no flag.
UNFLAGGED = "unflagged"


def flag(field_name: str) -> str:
    """The flag of the field ``field_name``: ``foo_bar`` -> ``--foo-bar``."""
    return "--" + field_name.replace("_", "-")


def nested(field: dataclasses.Field) -> tuple[type, tuple[str, ...]] | None:
    """``(its config class, its fields without a flag)`` for a field holding a config, else None.

    A field holds a config when its default is made by a dataclass (``default_factory``).
    """
    factory = field.default_factory
    if factory is dataclasses.MISSING or not dataclasses.is_dataclass(factory):
        return None
    return factory, tuple(field.metadata.get(UNFLAGGED, ()))  # type: ignore[return-value]


def docstring_entries(doc: str, heading: str) -> dict[str, str]:
    """``{name: description}`` of a Google-style docstring section (``Attributes``, ``Returns``).

    Each ``name: text`` entry, its continuation lines joined into one line; the section ends at
    the next line indented no deeper than its heading.
    """
    lines = inspect.cleandoc(doc).splitlines()
    if f"{heading}:" not in lines:
        return {}
    entries: dict[str, str] = {}
    current, indent = None, None
    for line in lines[lines.index(f"{heading}:") + 1 :]:
        if not line.strip():
            current = None
            continue
        width = len(line) - len(line.lstrip())
        if width == 0:
            break
        indent = indent or width
        head = re.match(r"(\w+):\s*(.*)$", line.strip()) if width == indent else None
        if head:
            current = head[1]
            entries[current] = head[2].strip()
        elif current:
            entries[current] += " " + line.strip()
    return entries


def attribute_docs(cls: type) -> dict[str, str]:
    """``{field: description}`` from a Google-style ``Attributes:`` docstring section."""
    entries = docstring_entries(cls.__doc__ or "", "Attributes")
    return {name: _plain(text) for name, text in entries.items()}


def _plain(text: str) -> str:
    """Docstring markup to terminal text: ``:data:`~a.b.C``` -> ``C``, double backticks dropped."""
    text = re.sub(r":\w+:`~?(?:[\w.]+\.)?([^`]+)`", r"\1", text)
    return text.replace("``", "")


def to_args(obj: Any, skip: Sequence[str] = ()) -> list[str]:
    """The flags that parse back into ``obj``: one per field that differs from its default.

    ``None`` values are left out, and so are the fields named in ``skip`` (a nested config's
    unflagged fields); a nested config's fields are written as flags of their own.
    """
    args: list[str] = []
    for field in dataclasses.fields(obj):
        if field.name in skip:
            continue
        value = getattr(obj, field.name)
        inner = nested(field)
        if inner is not None:
            args += to_args(value, skip=inner[1])
            continue
        default = None if field.default is dataclasses.MISSING else field.default
        if value is None or (field.default is not dataclasses.MISSING and value == default):
            continue
        name = flag(field.name)
        if isinstance(value, bool):
            args.append(name if value else f"--no-{name[2:]}")
        elif isinstance(value, tuple):
            args += [name, "x".join(str(v) for v in value)]
        else:
            args += [name, str(value)]
    return args
