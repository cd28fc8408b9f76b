"""What every component folder's unit tests check (components/<category>/<name>/tests/).

* the committed spec loads as a user loads it, names the component, and describes every input
  and output, as kubeflow/pipelines-components asks;
* the wrapper holds no logic: its body is its docstring, imports, and one call of a
  ``tfrecord_suite.steps`` function whose result it returns (or a namedtuple of it);
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
import re
import textwrap
from typing import Any

import yaml

from tfrecord_suite.kfp.catalog import folder, relative_folder

COMPONENTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "components")


def spec(name: str) -> dict[str, Any]:
    """The committed component.yaml."""
    with open(os.path.join(folder(name, COMPONENTS), "component.yaml")) as fh:
        return yaml.safe_load(fh)


def check_spec(name: str) -> None:
    from kfp import components

    from tfrecord_suite.kfp.catalog import ports
    from tfrecord_suite.kfp.components import COMPONENTS as FUNCTIONS

    loaded = components.load_component_from_file(
        os.path.join(folder(name, COMPONENTS), "component.yaml")
    )
    assert loaded.name == name.replace("_", "-")
    inputs, outputs = ports(spec(name))
    assert {p.name for p in inputs} == set(loaded.component_spec.inputs or {})
    missing = [p.name for p in inputs + outputs if not p.description]
    assert not missing, f"{name}: no description for {missing}"
    # the committed spec is what the function compiles to (make components)
    from tfrecord_suite.kfp.catalog import compile_spec

    with open(os.path.join(folder(name, COMPONENTS), "component.yaml")) as fh:
        assert fh.read() == compile_spec(name), (
            f"components/{relative_folder(name)} is stale: make components"
        )
    assert FUNCTIONS[name].__name__ == name


def check_wrapper(name: str) -> None:
    from tfrecord_suite.kfp.components import COMPONENTS as FUNCTIONS

    fn = ast.parse(textwrap.dedent(inspect.getsource(FUNCTIONS[name]))).body[0]
    body = fn.body[1:]  # after the docstring
    imports = [n for n in body if isinstance(n, ast.ImportFrom)]
    rest = [n for n in body if not isinstance(n, ast.ImportFrom)]
    steps = {"tfrecord_suite.steps.data", "tfrecord_suite.steps.training"}
    assert any(n.module in steps for n in imports), name
    assert {n.module for n in imports} <= {*steps, "collections"}, name
    # one call: `task(...)`, `return task(...)`, or `x = task(...)` then `return namedtuple(x)`
    calls = [n for n in rest if isinstance(getattr(n, "value", None), ast.Call)]
    assert len(rest) <= 2 and calls, f"{name}: the wrapper does more than call its step"
    first = calls[0].value.func
    assert isinstance(first, ast.Name) and first.id.endswith("_step"), name


#: kubeflow/pipelines-components scripts/validate_metadata/validate_metadata.py, its rules
REQUIRED_FIELDS = ["name", "stability", "dependencies", "lastVerified"]
OPTIONAL_FIELDS = ["tags", "ci", "links"]
STABILITY_OPTIONS = ["experimental", "alpha", "beta", "stable"]
DEPENDENCIES_FIELDS = ["kubeflow", "external_services"]
_SEMVER = re.compile(
    r"^(>=|<=|==)?(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-[\w.-]+)?(?:\+[\w.-]+)?$"
)


def metadata_problems(meta: dict[str, Any], now: dt.datetime) -> list[str]:
    """What upstream's metadata validator would refuse (its checks, restated)."""
    problems = []
    unknown = set(meta) - set(REQUIRED_FIELDS) - set(OPTIONAL_FIELDS)
    if unknown:
        problems.append(f"Unexpected field(s): {sorted(unknown)}")
    required = [k for k in meta if k in REQUIRED_FIELDS]
    if required != REQUIRED_FIELDS:
        problems.append(f"required fields {required}, expected in the order {REQUIRED_FIELDS}")
    if meta.get("stability") not in STABILITY_OPTIONS:
        problems.append(f"stability {meta.get('stability')!r}")
    deps = meta.get("dependencies") or {}
    if "kubeflow" not in deps or set(deps) - set(DEPENDENCIES_FIELDS):
        problems.append(f"dependencies keys {sorted(deps)}")
    for group in deps.values():
        for dep in group or []:
            if set(dep) != {"name", "version"} or not _SEMVER.match(str(dep["version"])):
                problems.append(f"dependency {dep}: name and a full semver version")
    if not any(d.get("name") == "Pipelines" for d in deps.get("kubeflow") or []):
        problems.append("dependencies.kubeflow has no Pipelines")
    verified = meta.get("lastVerified")
    if not isinstance(verified, dt.datetime) or abs(now - verified) >= dt.timedelta(days=365):
        problems.append(f"lastVerified {verified!r}: a timestamp within 365 days")
    if "ci" in meta and set(meta["ci"] or {}) - {"skip_dependency_probe"}:
        problems.append(f"ci keys {sorted(meta['ci'])}")
    if "tags" in meta and not all(isinstance(t, str) for t in meta["tags"]):
        problems.append("tags must be strings")
    return problems


def check_metadata(name: str) -> None:
    from tfrecord_suite.kfp.endpoint import MIN_BACKEND

    with open(os.path.join(folder(name, COMPONENTS), "metadata.yaml")) as fh:
        meta = yaml.safe_load(fh)
    assert metadata_problems(meta, dt.datetime.now(dt.UTC)) == []
    assert meta["name"] == name
    pipelines = next(d for d in meta["dependencies"]["kubeflow"] if d["name"] == "Pipelines")
    assert pipelines["version"] == ">=" + ".".join(map(str, MIN_BACKEND))
    with open(os.path.join(folder(name, COMPONENTS), "OWNERS")) as fh:
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


# ------------------------------------------------------------- running the committed specs


def load(name: str) -> Any:
    """The committed spec of component ``name``, as a user loads it."""
    from kfp import components

    return components.load_component_from_file(
        os.path.join(folder(name, COMPONENTS), "component.yaml")
    )


def imported(artifact: Any, cls: Any) -> Any:
    """Inside a pipeline: an earlier run's output artifact, its metadata as a cluster gives it
    (numbers as doubles, lists and structs wrapped: fakes/launcher.py)."""
    from kfp import dsl

    from fakes.launcher import mlmd_roundtrip

    return dsl.importer(
        artifact_uri=artifact.uri, artifact_class=cls, metadata=mlmd_roundtrip(artifact.metadata)
    ).output
