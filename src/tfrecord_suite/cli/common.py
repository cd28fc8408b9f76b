"""What every command shares: one-line errors, ``--json`` output, stdout under ``--json``."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import Any

import click

from tfrecord_suite.errors import UserError
from tfrecord_suite.io import storage

EXIT_USAGE = 2


def _known_errors() -> tuple[type[BaseException], ...]:
    """What the CLI shows as one line: what the user can fix, and faults of the environment.

    Everything else is a bug and keeps its traceback (as does everything with ``--debug``).
    """
    from tfrecord_suite.image_build import ImageBuildError

    return (UserError, FileNotFoundError, storage.StorageError, ImageBuildError)


def friendly_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn known exceptions into one ``error:`` line and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except click.exceptions.Exit:
            raise
        except Exception as exc:
            ctx = click.get_current_context(silent=True)
            debug = bool(ctx and ctx.find_root().params.get("debug"))
            if debug or not isinstance(exc, _known_errors()):
                raise
            click.echo(f"error: {exc}", err=True)
            sys.exit(EXIT_USAGE)

    return wrapper


def emit(result: Any, as_json: bool, human: Callable[[Any], str] | None = None) -> None:
    """Print ``result`` as JSON with ``--json`` (or without a ``human`` form), else as ``human``."""
    if as_json or human is None:
        click.echo(json.dumps(result, indent=2, sort_keys=True, default=str))
    else:
        click.echo(human(result))


json_option = click.option("--json", "as_json", is_flag=True, help="Print a JSON summary.")


def stdout_for(as_json: bool) -> Any:
    """With ``--json``, send everything else printed to stdout (Keras progress...) to stderr."""
    import contextlib

    return contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext()
