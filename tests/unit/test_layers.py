"""The layers hold: only the kfp side talks to kfp (the ``tfrecord_suite.kfp`` package: component
wrappers, step policies, compiler, placement, local runs, submission; and the two public faces
built on it, ``tfrecord_suite.components`` and the ready pipelines ``tfrecord_suite.pipelines``);
everything else, the step bodies of ``tfrecord_suite.steps`` included, runs without
it."""

import ast
import json
import pathlib
import pkgutil
import subprocess
import sys

import tfrecord_suite

#: Modules whose job is to talk to kfp; everything else is logic and must run without it.
KFP_SIDE = (
    "tfrecord_suite.kfp.components",
    "tfrecord_suite.kfp.step_policies",
    "tfrecord_suite.kfp.catalog",
    "tfrecord_suite.kfp.compile",
    "tfrecord_suite.kfp.task_placement",
    "tfrecord_suite.kfp.local_run",
    "tfrecord_suite.kfp.submit",
    "tfrecord_suite.kfp.endpoint",
    "tfrecord_suite.components",
    "tfrecord_suite.pipelines",
)


def _logic_modules():
    names = []
    for info in pkgutil.walk_packages(tfrecord_suite.__path__, "tfrecord_suite."):
        if not info.name.startswith(KFP_SIDE) and not info.name.endswith(".__main__"):
            names.append(info.name)
    return names


def _loaded_after_importing(modules: list[str], package: str, path: str = "") -> list[str]:
    """The modules of ``package`` loaded once ``modules`` are imported in a fresh interpreter
    (``path`` first on its ``sys.path``)."""
    code = (
        "import importlib, json, sys\n"
        f"sys.path.insert(0, {path!r})\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == {package!r})))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.splitlines()[-1])


def _kfp_after_importing(modules: list[str], path: str = "") -> list[str]:
    """The kfp modules loaded once ``modules`` are imported in a fresh interpreter."""
    return _loaded_after_importing(modules, "kfp", path)


def test_logic_modules_never_import_kfp():
    modules = _logic_modules()
    assert "tfrecord_suite.steps.data" in modules and "tfrecord_suite.launch.job" in modules
    assert "tfrecord_suite.steps.mlmd" in modules and "tfrecord_suite.podinfo" in modules
    assert _kfp_after_importing(modules) == []


def test_the_guard_would_catch_a_leak(tmp_path):
    """The check above can fail: a logic module that imports kfp is reported."""
    (tmp_path / "leaky_logic.py").write_text("import kfp.dsl\n")
    assert "kfp.dsl" in _kfp_after_importing(["leaky_logic"], str(tmp_path))


def _suite_modules_after_importing(modules: list[str]) -> list[str]:
    """The ``tfrecord_suite`` modules loaded once ``modules`` are imported, in a fresh
    interpreter."""
    return _loaded_after_importing(modules, "tfrecord_suite")


def test_the_kfp_side_and_the_launcher_never_import_the_command_line():
    """The launcher writes a config's flags with tfrecord_suite.flags, not the CLI's click code;
    kfp/ and launch/ (the train step's job, lease and data service included) load no cli module,
    and the same check sees the cli when a module does load it."""
    modules = [
        info.name
        for info in pkgutil.walk_packages(tfrecord_suite.__path__, "tfrecord_suite.")
        if info.name.startswith(("tfrecord_suite.kfp", "tfrecord_suite.launch"))
    ]
    assert (
        "tfrecord_suite.launch.train_step" in modules and "tfrecord_suite.kfp.components" in modules
    )
    loaded = _suite_modules_after_importing(modules)
    assert [m for m in loaded if m.startswith("tfrecord_suite.cli")] == []
    assert "tfrecord_suite.cli.options" in _suite_modules_after_importing(
        ["tfrecord_suite.cli.train"]
    )


def _imported(path: pathlib.Path) -> set[str]:
    """Every module an import statement of ``path`` names (those inside functions too)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.update([node.module, *(f"{node.module}.{a.name}" for a in node.names)])
    return names


def test_every_module_of_the_kfp_package_talks_to_kfp():
    """kfp/ holds only what imports kfp (the kfp-free step bodies are tfrecord_suite.steps): each
    of its modules imports kfp, or a module of kfp/ that does (many import it in the functions
    that need it, so that the CLI starts fast)."""
    package = pathlib.Path(tfrecord_suite.__file__).parent / "kfp"
    imports = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent.parent).with_suffix("").parts
        imports[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = _imported(path)
    talks = {m for m, names in imports.items() if any(n.split(".")[0] == "kfp" for n in names)}
    while True:
        more = {m for m, names in imports.items() if m not in talks and names & talks}
        if not more:
            break
        talks |= more
    assert "tfrecord_suite.kfp.submit" in imports
    assert sorted(set(imports) - talks - {"tfrecord_suite.kfp"}) == []


def _import_cycles(root: pathlib.Path) -> list[list[str]]:
    """The import cycles among the modules under ``root`` (every import statement, those inside
    functions too): strongly connected components of more than one module."""
    modules = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path

    def known(name: str) -> str:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name

    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [known(a.name) for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                targets = [known(f"{node.module}.{a.name}") for a in node.names]
            else:
                continue
            graph[module].update(t for t in targets if t and t != module)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = stack[stack.index(v) :]
            del stack[stack.index(v) :]
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return cycles


def test_no_import_cycle_in_the_package():
    src = pathlib.Path(tfrecord_suite.__file__).parent.parent
    assert _import_cycles(src) == []


def test_the_cycle_check_would_catch_one(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "a.py").write_text("def f():\n    from pkg.b import g\n")
    (tmp_path / "pkg" / "b.py").write_text("from pkg import a\n")
    assert _import_cycles(tmp_path) == [["pkg.a", "pkg.b"]]
