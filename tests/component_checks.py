"""What every component folder's unit tests check (components/<name>/tests/).

* the committed spec loads as a user loads it, names the component, and describes every input
  and output, as kubeflow/pipelines-components asks;
* the wrapper holds no logic: its body is its docstring, imports, and one call of a
  ``tfrecord_suite.kfp.tasks`` function whose result it returns (or a namedtuple of it);
* its ``metadata.yaml`` has pipelines-components' fields, its own name, and the minimum KFP
  backend the suite checks on submit;
* its defaults are the suite's configuration defaults (the config dataclasses are the one
  place they are defined; a component function cannot import them into its embedded source).
"""

from __future__ import annotations

import ast
import datetime as dt
import inspect
import os
import textwrap
from typing import Any

import yaml

COMPONENTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "components")


def spec(name: str) -> dict[str, Any]:
    """The committed component.yaml."""
    with open(os.path.join(COMPONENTS, name, "component.yaml")) as fh:
        return yaml.safe_load(fh)


def check_spec(name: str) -> None:
    from kfp import components

    from tfrecord_suite.kfp.catalog import ports
    from tfrecord_suite.kfp.components import COMPONENTS as FUNCTIONS

    loaded = components.load_component_from_file(os.path.join(COMPONENTS, name, "component.yaml"))
    assert loaded.name == name.replace("_", "-")
    inputs, outputs = ports(spec(name))
    assert {p.name for p in inputs} == set(loaded.component_spec.inputs or {})
    missing = [p.name for p in inputs + outputs if not p.description]
    assert not missing, f"{name}: no description for {missing}"
    # the committed spec is what the function compiles to (make components)
    from tfrecord_suite.kfp.catalog import compile_spec

    with open(os.path.join(COMPONENTS, name, "component.yaml")) as fh:
        assert fh.read() == compile_spec(name), f"components/{name} is stale: make components"
    assert FUNCTIONS[name].__name__ == name


def check_wrapper(name: str) -> None:
    from tfrecord_suite.kfp.components import COMPONENTS as FUNCTIONS

    fn = ast.parse(textwrap.dedent(inspect.getsource(FUNCTIONS[name]))).body[0]
    body = fn.body[1:]  # after the docstring
    imports = [n for n in body if isinstance(n, ast.ImportFrom)]
    rest = [n for n in body if not isinstance(n, ast.ImportFrom)]
    assert any(n.module == "tfrecord_suite.kfp.tasks" for n in imports), name
    assert {n.module for n in imports} <= {"tfrecord_suite.kfp.tasks", "collections"}, name
    # one call: `task(...)`, `return task(...)`, or `x = task(...)` then `return namedtuple(x)`
    calls = [n for n in rest if isinstance(getattr(n, "value", None), ast.Call)]
    assert len(rest) <= 2 and calls, f"{name}: the wrapper does more than call its task"
    first = calls[0].value.func
    assert isinstance(first, ast.Name) and first.id.endswith("_task"), name


def check_metadata(name: str) -> None:
    from tfrecord_suite.kfp.endpoint import MIN_BACKEND

    with open(os.path.join(COMPONENTS, name, "metadata.yaml")) as fh:
        meta = yaml.safe_load(fh)
    assert meta["name"] == name
    assert meta["tier"] in ("core", "third_party")
    assert meta["stability"] in ("alpha", "beta", "stable")
    pipelines = next(d for d in meta["dependencies"]["kubeflow"] if d["name"] == "Pipelines")
    assert pipelines["version"] == ">=" + ".".join(map(str, MIN_BACKEND))
    assert isinstance(meta["lastVerified"], dt.datetime)
    assert meta["tags"] and all(t == t.lower() for t in meta["tags"])
    with open(os.path.join(COMPONENTS, name, "OWNERS")) as fh:
        owners = yaml.safe_load(fh)
    assert owners["approvers"] and owners["reviewers"]


def defaults(name: str) -> dict[str, Any]:
    """The component function's defaults, by input."""
    from tfrecord_suite.kfp.components import COMPONENTS as FUNCTIONS

    return {
        k: p.default
        for k, p in inspect.signature(FUNCTIONS[name]).parameters.items()
        if p.default is not inspect.Parameter.empty
    }
