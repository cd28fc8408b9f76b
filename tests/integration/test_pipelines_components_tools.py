"""The component folders pass kubeflow/pipelines-components' own checks.

Its tools are not published anywhere this project installs from (PyPI's `kfp-components` holds
its components, not its scripts), so there are two ways this runs:

* With a copy of kubeflow/pipelines-components at hand (`PIPELINES_COMPONENTS_REPO`: a checkout,
  or a bare git directory), its own scripts run on a copy of `components/`: the metadata
  validator (`scripts/validate_metadata`), the freshness checker
  (`scripts/check_component_freshness`), the compile check (`scripts/validate_components`),
  the README generator in check mode (`scripts/generate_readme`, as its README Validation
  workflow runs it, category indexes included) and the import guard
  (`.github/scripts/check_imports`). Nothing of it is committed here.
* Always: the same rules restated (`test_*_as_restated`), each naming the upstream file whose
  rule it restates. Without the copy the upstream run is skipped and says why.
"""

from __future__ import annotations

import ast
import datetime as dt
import importlib.util
import itertools
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile

import pytest
import yaml
from component_checks import COMPONENTS, metadata_problems

from tfrecord_suite.kfp import catalog
from tfrecord_suite.kfp.components import COMPONENTS as FUNCTIONS

ROOT = os.path.dirname(COMPONENTS)
UPSTREAM = os.environ.get("PIPELINES_COMPONENTS_REPO", "")
FOLDERS = [catalog.relative_folder(name) for name in FUNCTIONS]


def _discovered(root: str) -> list[str]:
    """scripts/lib/discovery.py find_assets_with_metadata("components"), restated: each
    category's folders holding metadata.yaml (one level of subcategory allowed)."""
    found = []
    for category in sorted(os.listdir(root)):
        cdir = os.path.join(root, category)
        if not os.path.isdir(cdir) or category.startswith((".", "_")):
            continue
        for item in sorted(os.listdir(cdir)):
            idir = os.path.join(cdir, item)
            listed = os.path.isdir(idir) and not item.startswith((".", "_"))
            if listed and os.path.exists(os.path.join(idir, "metadata.yaml")):
                found.append(f"{category}/{item}")
    return found


def test_the_layout_is_the_one_its_discovery_walks_as_restated():
    assert sorted(_discovered(COMPONENTS)) == sorted(FOLDERS)
    for rel in FOLDERS:
        for name in ("component.py", "metadata.yaml", "OWNERS", "README.md"):
            assert os.path.isfile(os.path.join(COMPONENTS, rel, name)), (rel, name)


@pytest.mark.parametrize("rel", FOLDERS)
def test_metadata_owners_and_freshness_as_restated(rel):
    """scripts/validate_metadata/validate_metadata.py (fields, order, stability, dependencies,
    lastVerified within 365 days; OWNERS with an approver under `approvers:`) and
    scripts/check_component_freshness (fresh: verified within 270 days)."""
    with open(os.path.join(COMPONENTS, rel, "metadata.yaml")) as fh:
        meta = yaml.safe_load(fh)
    now = dt.datetime.now(dt.UTC)
    assert metadata_problems(meta, now) == []
    assert (now - meta["lastVerified"]).days < 270, "re-verify it and move lastVerified"
    with open(os.path.join(COMPONENTS, rel, "OWNERS")) as fh:
        lines = fh.read().splitlines()
    assert any(
        a.startswith("approvers:") and b.strip().startswith("-") and len(b.strip()) > 2
        for a, b in itertools.pairwise(lines)
    )


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_readme_is_what_its_generator_writes_as_restated(name):
    """scripts/generate_readme: the README is its generated part, then its custom-content
    marker (after which it keeps everything); the category index is its index."""
    with open(os.path.join(catalog.folder(name, COMPONENTS), "README.md")) as fh:
        text = fh.read()
    meta = catalog.load_metadata(COMPONENTS, name)
    with open(os.path.join(catalog.folder(name, COMPONENTS), "OWNERS")) as fh:
        owners = yaml.safe_load(fh)
    head, marker, _ = text.partition(catalog.CUSTOM_CONTENT_MARKER)
    assert marker and head == catalog.upstream_readme(name, meta, owners) + "\n\n"
    category = catalog.CATEGORIES[name]
    with open(os.path.join(COMPONENTS, category, "README.md")) as fh:
        index = fh.read()
    metadata = {n: catalog.load_metadata(COMPONENTS, n) for n in FUNCTIONS}
    assert index == catalog.category_readme(category, metadata)
    assert f"(./{name}/README.md)" in index


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_component_py_compiles_to_the_spec_as_restated(name, tmp_path):
    """scripts/validate_components: each component.py's @dsl.component compiles; here also to
    the inputs and outputs of the committed component.yaml."""
    from kfp import compiler

    path = os.path.join(catalog.folder(name, COMPONENTS), "component.py")
    spec = importlib.util.spec_from_file_location(f"upstream_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    compiler.Compiler().compile(getattr(module, name), str(tmp_path / "c.yaml"))
    with open(tmp_path / "c.yaml") as fh:
        compiled = yaml.safe_load(fh)
    with open(os.path.join(catalog.folder(name, COMPONENTS), "component.yaml")) as fh:
        committed = yaml.safe_load(fh)

    def shape(doc):
        (comp,) = doc["components"].values()
        return {
            side: {
                group: {
                    k: {f: v for f, v in p.items() if f != "description"} for k, p in ports.items()
                }
                for group, ports in comp.get(side, {}).items()
            }
            for side in ("inputDefinitions", "outputDefinitions")
        }

    assert shape(compiled) == shape(committed)


def test_imports_at_module_scope_as_restated():
    """.github/scripts/check_imports: a file under components/ imports only the standard
    library, kfp and pytest at module scope (tests may import `tests`); the rest inside
    functions, where the image has it."""
    allowed = {"kfp", "pytest", "tests"} | set(sys.stdlib_module_names)
    bad = []
    for folder, _, files in os.walk(COMPONENTS):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(folder, f)
                for node in ast.parse(open(path).read()).body:
                    mods = []
                    if isinstance(node, ast.Import):
                        mods = [a.name for a in node.names]
                    elif isinstance(node, ast.ImportFrom) and node.level == 0:
                        mods = [node.module or ""]
                    bad += [f"{path}: {m}" for m in mods if m.split(".")[0] not in allowed]
    assert bad == []


# ------------------------------------------------------------------- upstream's own scripts


def _upstream_copy(dest: str) -> None:
    """scripts/ and .github/scripts/check_imports of the copy at UPSTREAM, into ``dest``."""
    wanted = ["scripts", ".github/scripts/check_imports"]
    if os.path.isdir(os.path.join(UPSTREAM, "scripts")):
        for rel in wanted:
            shutil.copytree(os.path.join(UPSTREAM, rel), os.path.join(dest, rel))
        return
    archive = subprocess.run(
        ["git", f"--git-dir={UPSTREAM}", "archive", "--format=tar", "HEAD", *wanted],
        capture_output=True, check=True,
    ).stdout  # fmt: skip
    with tempfile.TemporaryFile() as fh:
        fh.write(archive)
        fh.seek(0)
        with tarfile.open(fileobj=fh) as tar:
            tar.extractall(dest, filter="data")


@pytest.fixture(scope="module")
def upstream_tree(tmp_path_factory):
    if not UPSTREAM:
        pytest.skip(
            "no copy of kubeflow/pipelines-components (PIPELINES_COMPONENTS_REPO unset): its "
            "scripts are published nowhere this project installs from; the restated checks ran"
        )
    tree = tmp_path_factory.mktemp("pipelines-components")
    _upstream_copy(str(tree))
    shutil.copytree(COMPONENTS, tree / "components", ignore=shutil.ignore_patterns("__pycache__"))
    return tree


def _run(tree, *args):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), *sys.path])}
    proc = subprocess.run(
        [sys.executable, *args], cwd=tree, capture_output=True, text=True, env=env, timeout=600
    )
    assert proc.returncode == 0, f"{' '.join(args)}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout + proc.stderr


def test_upstream_validate_metadata(upstream_tree):
    for rel in FOLDERS:
        out = _run(upstream_tree, "-m", "scripts.validate_metadata.validate_metadata",
                   "--dir", f"components/{rel}")  # fmt: skip
        assert f"Validation successful for components/{rel}" in out


def test_upstream_freshness_checker_finds_every_component_fresh(upstream_tree):
    out = _run(upstream_tree, "-m", "scripts.check_component_freshness.check_component_freshness",
               ".", "--json", "fresh.json")  # fmt: skip
    with open(upstream_tree / "fresh.json") as fh:
        summary = yaml.safe_load(fh)["summary"]
    assert summary["fresh"] == summary["total"] == len(FUNCTIONS), out


def test_upstream_compile_check(upstream_tree):
    out = _run(upstream_tree, "-m", "scripts.validate_components.validate_components",
               "--directories", "components")  # fmt: skip
    assert "All validations passed" in out


def test_upstream_readme_generator_finds_every_readme_in_sync(upstream_tree):
    for rel in FOLDERS:
        out = _run(upstream_tree, "-m", "scripts.generate_readme", "--component",
                   f"components/{rel}")  # fmt: skip
        assert "All README files are in sync" in out


def test_upstream_import_guard(upstream_tree):
    _run(upstream_tree, ".github/scripts/check_imports/check_imports.py", "--config",
         ".github/scripts/check_imports/import_exceptions.yaml", "components")  # fmt: skip


def test_owners_name_the_alias_defined_once_and_not_done_says_it_lists_nobody():
    """Every OWNERS names an alias of OWNERS_ALIASES, the one list of maintainers; while that
    list is empty, docs/not-done.md says so."""
    with open(os.path.join(ROOT, "OWNERS_ALIASES")) as fh:
        aliases = yaml.safe_load(fh)["aliases"]
    for rel in FOLDERS:
        with open(os.path.join(COMPONENTS, rel, "OWNERS")) as fh:
            owners = yaml.safe_load(fh)
        for role in ("approvers", "reviewers"):
            assert set(owners[role]) <= set(aliases), (rel, role)
    if not any(aliases.values()):
        with open(os.path.join(ROOT, "docs", "not-done.md")) as fh:
            assert "OWNERS_ALIASES" in fh.read()
