"""The docs cannot drift: the site builds strict, every `tfrecord-suite` command shown in the README
and the docs parses against the real command line, every repository path they name exists, and
the shell blocks marked runnable run, on small data (`<!-- runnable -->` before a ```bash block;
each runs in a fresh folder holding data/penguins.csv and data/digits/, the stand-ins for "your
own" CSV and image folder)."""

from __future__ import annotations

import glob
import os
import re
import shlex
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = sorted(glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))
PAGES = [os.path.join(ROOT, "README.md"), *DOCS]
PAGES = [p for p in PAGES if f"{os.sep}bench{os.sep}" not in p]
QUIET = {"NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true"}
BLOCK = re.compile(r"(<!-- runnable -->\n)?```(bash|sh|console)\n(.*?)```", re.S)
#: Top-level folders a page may name paths in.
TOP = ("src/", "k8s/", "tests/", "pipelines/", "components/", "containers/", "docs/", ".github/",
       "benchmarks/")  # fmt: skip


def _rel(path: str) -> str:
    return os.path.relpath(path, ROOT)


def shell_blocks() -> list[tuple[str, bool, str]]:
    """``(page, runnable, script)`` of every shell block."""
    out = []
    for page in PAGES:
        text = open(page).read()
        for m in BLOCK.finditer(text):
            out.append((_rel(page), bool(m[1]), m[3]))
    return out


def commands(script: str) -> list[list[str]]:
    """The ``tfrecord-suite`` command lines of a script, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", script)
    out = []
    for line in joined.splitlines():
        line = line.split(" #", 1)[0].strip()
        if line.startswith("tfrecord-suite "):
            out.append(shlex.split(line.replace("$(", "(").replace("${", "{")))
    return out


def test_the_site_builds_strict(tmp_path):
    proc = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "mkdocs"), "build", "--strict",
         "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, env={**os.environ, **QUIET}, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert (tmp_path / "site" / "deploy" / "index.html").exists()
    assert (tmp_path / "site" / "reference" / "components" / "shard" / "index.html").exists()


def test_every_command_shown_parses_against_the_command_line():
    """A flag renamed or removed in the code fails here, wherever a page shows it."""
    import click

    from tfrecord_suite.cli.main import main

    checked = 0
    for page, _, script in shell_blocks():
        for argv in commands(script):
            cmd, args, names = main, argv[1:], ["tfrecord-suite"]
            while isinstance(cmd, click.Group) and args and not args[0].startswith("-"):
                names.append(args[0])
                cmd = cmd.get_command(click.Context(cmd), args.pop(0))
                assert cmd is not None, f"{page}: no command {' '.join(names)}"
            ctx = click.Context(cmd, info_name=" ".join(names), resilient_parsing=True)
            parser = cmd.make_parser(ctx)
            try:
                parser.parse_args(list(args))
            except click.UsageError as exc:
                pytest.fail(f"{page}: `{' '.join(argv)}`: {exc}")
            checked += 1
    assert checked >= 15, checked


def test_every_repository_path_named_exists():
    missing = []
    for page in PAGES:
        for path in re.findall(r"`([.\w/-]+)`", open(page).read()):
            named = path.startswith(TOP) and "<" not in path and "*" not in path
            if named and not os.path.exists(os.path.join(ROOT, path.rstrip("/"))):
                missing.append(f"{_rel(page)}: {path}")
    assert missing == []


RUNNABLE = [(page, script) for page, runnable, script in shell_blocks() if runnable]


@pytest.fixture(scope="module")
def sample_data(tmp_path_factory):
    from tfrecord_suite import demo_data

    root = tmp_path_factory.mktemp("docs-data")
    demo_data.write_penguins(str(root / "penguins.csv"))
    demo_data.write_digits(str(root / "digits"))
    return root


@pytest.mark.e2e
@pytest.mark.parametrize(("page", "script"), RUNNABLE, ids=[f"{p}#{i}" for i, (p, _) in
                         enumerate(RUNNABLE)])  # fmt: skip
def test_runnable_blocks_run(page, script, sample_data, tmp_path):
    os.symlink(sample_data, tmp_path / "data")
    env = {**os.environ, **QUIET,
           "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]}  # fmt: skip
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=tmp_path, capture_output=True, text=True, env=env, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, f"{page}:\n{script}\n{proc.stderr[-3000:]}"


def test_there_are_runnable_blocks_in_the_readme_and_the_docs():
    pages = {page for page, _ in RUNNABLE}
    assert "README.md" in pages and "docs/getting-started.md" in pages
