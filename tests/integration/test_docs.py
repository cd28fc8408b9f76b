"""The docs cannot drift: the site builds strict, every `tfrecord-suite` command shown in the README
and the docs parses against the real command line, every repository path they name exists, and
the shell blocks marked runnable run as a reader runs them.

A reader of the README or of getting-started follows the page from the top on a fresh clone: the
test copies the repository's files into an empty folder, stands in for the Set up block's
`make venv` (which would build a virtual environment) with a link to the environment under test,
and runs the rest of the Set up block and every block marked `<!-- runnable -->` verbatim, in
order, in one shell whose PATH does not hold the environment until the page's own `export` puts
it there. Nothing else is prepared: the data the examples read is what the page's own commands
write. Other pages' runnable blocks run alike, each page in a fresh copy of its own.
"""

from __future__ import annotations

import glob
import itertools
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
#: A shell block and the marker above it: ``runnable`` (a reader runs it, the e2e test too),
#: ``setup`` (a page's Set up block) or ``kubeflow-walk`` (docs/deploy.md's steps on a cluster,
#: which tests/integration/test_kubeflow_walk.py types on the one-node cluster)
BLOCK = re.compile(
    r"(<!-- (runnable|setup|kubeflow-walk) -->\n)?```(bash|sh|console)\n(.*?)```", re.S
)
#: The Set up block's command that builds the virtual environment, which the test stands in for.
MAKE_VENV = re.compile(r"^make venv(\s+#.*)?$")
#: Top-level folders a page may name paths in.
TOP = ("src/", "k8s/", "tests/", "pipelines/", "components/", "containers/", "docs/", ".github/",
       "benchmarks/")  # fmt: skip


def _rel(path: str) -> str:
    return os.path.relpath(path, ROOT)


def shell_blocks() -> list[tuple[str, str, str]]:
    """``(page, marker, script)`` of every shell block; marker is one of BLOCK's, or empty."""
    out = []
    for page in PAGES:
        text = open(page).read()
        for m in BLOCK.finditer(text):
            out.append((_rel(page), m[2] or "", m[4]))
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
    site = tmp_path / "site"
    assert (site / "deploy" / "index.html").exists()
    assert (site / "reference" / "components" / "shard" / "index.html").exists()
    check_rendered_reference(site)
    check_diagrams_render_offline(site)


def _default_cells(html: str) -> list[str]:
    """The cells of every table column headed "default" in a rendered page."""
    cells = []
    for table in re.findall(r"<table>(.*?)</table>", html, re.S):
        header = [re.sub(r"<[^>]+>", "", h).strip().lower()
                  for h in re.findall(r"<th[^>]*>(.*?)</th>", table, re.S)]  # fmt: skip
        if "default" not in header:
            continue
        col = header.index("default")
        for row in re.findall(r"<tr>(.*?)</tr>", table, re.S)[1:]:
            row_cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
            cells.append(row_cells[col].strip() if col < len(row_cells) else "")
    return cells


def check_rendered_reference(site) -> None:
    """The reference as a reader sees it: every default is a value, "required" or "not set";
    no placeholder of the generator (Sentinel.UNSET, _required), no empty one; no folder of the
    machine that built the site."""
    pages = list(site.rglob("*.html"))
    checkout = re.compile(re.escape(ROOT) + r"(?![\w.-])")
    checked = 0
    for page in pages:
        html = page.read_text()
        rel = page.relative_to(site)
        # the checkout as a whole path: a page may name another folder that starts alike (a
        # checkout at /tmp/fresh built a page that names /tmp/fresh-cluster)
        assert not checkout.search(html), f"{rel} names the build checkout {ROOT}"
        if not str(rel).startswith("reference"):
            continue
        for bad in ("Sentinel", "_required", "<code></code>"):
            assert bad not in html, f"{rel}: {bad}"
        cells = _default_cells(html)
        assert all(re.sub(r"<[^>]+>", "", c).strip() for c in cells), f"{rel}: an empty default"
        checked += len(cells)
    assert checked > 300, checked  # every flag, field, input and parameter


def check_diagrams_render_offline(site) -> None:
    """Every page with a Mermaid diagram loads Mermaid from the site itself: the theme fetches
    it from a CDN only where no global `mermaid` is defined, and the vendored file defines it."""
    import hashlib

    with open(os.path.join(ROOT, "Makefile")) as fh:
        makefile = fh.read()
    version = re.search(r"^MERMAID_VERSION := (\S+)$", makefile, re.M)[1]
    digest = re.search(r"^MERMAID_SHA256 := (\S+)$", makefile, re.M)[1]
    vendored = site / "assets" / "vendor" / f"mermaid-{version}.min.js"
    js = vendored.read_bytes()
    assert hashlib.sha256(js).hexdigest() == digest  # the npm release, as `make docs-vendor` checks
    assert js.rstrip().endswith(
        b'globalThis["mermaid"] = globalThis.__esbuild_esm_mermaid_nm["mermaid"].default;'
    )
    (bundle,) = (site / "assets" / "javascripts").glob("bundle.*.min.js")
    assert 'typeof mermaid=="undefined"' in bundle.read_text()  # the theme's own test
    diagrams = 0
    for page in site.rglob("*.html"):
        html = page.read_text()
        if 'class="mermaid"' in html:
            diagrams += 1
            srcs = re.findall(r'<script src="([^"]+)"', html)
            assert any(src.endswith(f"assets/vendor/mermaid-{version}.min.js") for src in srcs), (
                page
            )
            assert not any(src.startswith(("http:", "https:", "//")) for src in srcs), page
    assert diagrams >= 2  # the home page's DAG and the ready pipelines'


#: A table column of flags and the commands that take them: "flags of `compile`, `submit`".
FLAG_COLUMN = re.compile(r"flags of ((?:`[\w-]+`(?:,? and |, )?)+)")


def flag_table_commands() -> list[tuple[str, list[str]]]:
    """``(page, argv)`` for each flag a table shows under a column headed "flags of `a`, `b`",
    once per command the header names: ``["tfrecord-suite", "a", "--flag", "value"]``. Each
    code span of a cell that starts with ``--`` is one command line. A column headed "flags"
    that names no command fails: its flags could belong to any."""
    out = []
    for page in PAGES:
        rows = [line.strip().strip("|").split("|") for line in open(page)
                if line.startswith("|")]  # fmt: skip
        commands_of: list[list[str] | None] = []
        for cells, below in itertools.zip_longest(rows, rows[1:]):
            if set("".join(cells)) <= set("-: "):  # the line under a header
                continue
            if below is not None and set("".join(below)) <= set("-: "):  # a header
                named = [FLAG_COLUMN.search(c) for c in cells]
                unnamed = [c for c, m in zip(cells, named, strict=True)
                           if not m and re.search(r"\bflags\b", c)]  # fmt: skip
                assert unnamed == [], f"{_rel(page)}: say whose flags: {unnamed}"
                commands_of = [re.findall(r"`([\w-]+)`", m[1]) if m else None for m in named]
                continue
            for commands_, cell in zip(commands_of, cells, strict=False):
                for span in re.findall(r"`([^`]+)`", cell) if commands_ else ():
                    if span.startswith("--"):
                        out += [(_rel(page), ["tfrecord-suite", c, *shlex.split(span)])
                                for c in commands_]  # fmt: skip
    return out


def parse_or_fail(page: str, argv: list[str]) -> None:
    """Parse ``argv`` as the command line would, failing the test with what it refused: an
    unknown command, flag or a flag's missing value, or a ``--param`` the pipeline lacks."""
    import click

    from tfrecord_suite.cli.main import main
    from tfrecord_suite.errors import UserError
    from tfrecord_suite.kfp.submit import parse_params

    cmd, args, names = main, argv[1:], ["tfrecord-suite"]
    while isinstance(cmd, click.Group) and args and not args[0].startswith("-"):
        names.append(args[0])
        cmd = cmd.get_command(click.Context(cmd), args.pop(0))
        assert cmd is not None, f"{page}: no command {' '.join(names)}"
    # not resilient: resilient parsing drops an unknown flag without a word
    ctx = click.Context(cmd, info_name=" ".join(names))
    try:
        opts, _, _ = cmd.make_parser(ctx).parse_args(list(args))
        if opts.get("params"):
            pipeline = opts.get("pipeline") or "retraining"
            # a shell variable the page sets (docs/deploy.md's walk): the default's parameters
            # here; each value the page offers is test_kubeflow_walk's to parse
            parse_params(opts["params"], "retraining" if pipeline.startswith("$") else pipeline)
    except (click.UsageError, UserError) as exc:
        pytest.fail(f"{page}: `{' '.join(argv)}`: {exc}")


def test_every_command_shown_parses_against_the_command_line():
    """A flag renamed or removed in the code fails here, wherever a page shows it: in a shell
    block, or in a table's column of the flags some commands take."""
    shown = [(page, argv) for page, _, script in shell_blocks() for argv in commands(script)]
    tables = flag_table_commands()
    for page, argv in shown + tables:
        parse_or_fail(page, argv)
    assert len(shown) >= 15 and len(tables) >= 20, (len(shown), len(tables))


def test_a_flag_a_command_lacks_fails_the_parse():
    """The check above can fail: `compile` takes no `--param`, and no pipeline a `strategy2`."""
    for argv in (["tfrecord-suite", "compile", "--param", "workers=4"],
                 ["tfrecord-suite", "submit", "--param", "strategy2=tpu"],
                 ["tfrecord-suite", "submit", "--output"]):  # fmt: skip
        with pytest.raises(pytest.fail.Exception, match=re.escape("page.md: `tfrecord-suite")):
            parse_or_fail("page.md", argv)


def test_every_repository_path_named_exists():
    missing = []
    for page in PAGES:
        for path in re.findall(r"`([.\w/-]+)`", open(page).read()):
            named = path.startswith(TOP) and "<" not in path and "*" not in path
            if named and not os.path.exists(os.path.join(ROOT, path.rstrip("/"))):
                missing.append(f"{_rel(page)}: {path}")
    assert missing == []


def repository_files() -> list[str]:
    """The repository's files, tracked and new ones git does not ignore, relative to ROOT."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "-co", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    return [rel for rel in listed if rel and os.path.isfile(os.path.join(ROOT, rel))]


#: A path to a Python file under a top-level folder, as comments, docstrings and pages name one.
PY_PATH = re.compile(r"(?<![\w./-])((?:\.ci|\.github|[a-z]\w*)/(?:[\w.-]+/)*[\w.-]+\.py)(?![\w/])")

#: Stale test files named where the fix is not this test's to make: (path, file naming it) ->
#: why. One that was fixed fails the test until it is removed from here.
NAMED_ELSEWHERE: dict[tuple[str, str], str] = {}


def test_every_test_file_named_in_the_repository_exists():
    """A test file named in any text file of the repository (a comment, a docstring, a page, a
    manifest, CI's scripts) is there: a test moved or renamed fails here, wherever it was named.
    A test file is a Python file in a tests/ folder, or named test_*.py or conftest.py."""
    files = repository_files()
    tops = {rel.split("/", 1)[0] for rel in files if "/" in rel}
    listed_here = {(path, _rel(__file__)) for path, _ in NAMED_ELSEWHERE}
    named = set()
    for rel in files:
        try:
            text = open(os.path.join(ROOT, rel), encoding="utf-8").read()
        except UnicodeDecodeError:  # images, archives
            continue
        for path in PY_PATH.findall(text):
            name = os.path.basename(path)
            is_test = "/tests/" in f"/{path}" or name.startswith("test_") or name == "conftest.py"
            if is_test and path.split("/", 1)[0] in tops:
                named.add((path, rel))
    missing = {(path, rel) for path, rel in named - listed_here
               if not os.path.exists(os.path.join(ROOT, path))}  # fmt: skip
    assert len(named) > 100, len(named)  # the pattern finds the repository's own references
    assert missing == set(NAMED_ELSEWHERE), sorted(missing)


#: Pages with runnable blocks, each with its Set up block (if any) and runnable blocks in order.
RUNNABLE_PAGES = sorted({page for page, marker, _ in shell_blocks() if marker == "runnable"})


def setup_script(page: str) -> str | None:
    """``page``'s Set up block without ``make venv`` (None: the page has none)."""
    for p, marker, script in shell_blocks():
        if p == page and marker == "setup":
            kept = [line for line in script.splitlines() if not MAKE_VENV.match(line.strip())]
            assert len(kept) == len(script.splitlines()) - 1, f"{page}: no `make venv` in Set up"
            return "\n".join(kept) + "\n"
    return None


def marked_blocks(page: str, marker: str) -> list[str]:
    """``page``'s shell blocks marked ``<!-- marker -->``, in order."""
    return [script for p, m, script in shell_blocks() if p == page and m == marker]


def reader_script(page: str, marker: str = "runnable") -> str:
    """What a reader of ``page`` types, in order: the Set up block but ``make venv``, then every
    block marked ``marker``. A page without a Set up block is read after Getting started's."""
    setup = setup_script(page) or setup_script("docs/getting-started.md")
    return "".join([setup or "", *marked_blocks(page, marker)])


def fresh_clone(dest: str) -> str:
    """The repository's files (tracked, and new ones git does not ignore) copied into ``dest``,
    with ``.venv`` linked to the environment under test, as `make venv` would have left it."""
    import shutil

    for rel in repository_files():
        src = os.path.join(ROOT, rel)
        if rel == ".venv" or rel.startswith(".venv/"):
            continue
        os.makedirs(os.path.dirname(os.path.join(dest, rel)), exist_ok=True)
        shutil.copy2(src, os.path.join(dest, rel))
    os.symlink(sys.prefix, os.path.join(dest, ".venv"))
    return dest


def reader_env() -> dict[str, str]:
    """This environment without the virtual environment on PATH: the reader's shell before Set up."""
    venv_bin = os.path.realpath(os.path.dirname(sys.executable))
    path = [p for p in os.environ["PATH"].split(os.pathsep) if os.path.realpath(p) != venv_bin]
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    return {**env, **QUIET, "PATH": os.pathsep.join(path)}


def reads() -> list[list[str]]:
    """The runnable pages grouped by what their reader types: pages whose readers type the same
    script (README's quick start is Getting started's commands) are one run, not one each."""
    groups: dict[str, list[str]] = {}
    for page in RUNNABLE_PAGES:
        groups.setdefault(reader_script(page), []).append(page)
    return list(groups.values())


READS = reads()


@pytest.mark.e2e
@pytest.mark.parametrize("pages", READS, ids=["+".join(pages) for pages in READS])
def test_a_reader_runs_the_page_verbatim_on_a_fresh_clone(pages, tmp_path):
    page = pages[0]  # the others type the same script
    clone = fresh_clone(str(tmp_path / "clone"))
    env = reader_env()
    found = subprocess.run(["bash", "-c", "command -v tfrecord-suite"], env=env, cwd=clone)
    assert found.returncode != 0, "tfrecord-suite is on PATH before the page's Set up"
    script = reader_script(page)
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=clone, capture_output=True, text=True, env=env, timeout=1500,
    )  # fmt: skip
    assert proc.returncode == 0, (
        f"{'+'.join(pages)}:\n{script}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    )
    # what the pages say of the printed `model:` folder: the SavedModel, metrics, the report
    for folder in re.findall(r"^model: (.+)$", proc.stdout, re.M):
        folder = os.path.join(clone, folder)
        assert os.path.isdir(os.path.join(folder, "export")), folder
        assert os.path.isfile(os.path.join(folder, "metrics.json")), folder
        assert os.path.isfile(os.path.join(folder, "report.md")), folder


def test_the_readmes_quick_start_is_getting_starteds_commands_in_its_order():
    """README says so; it is also why the two pages are read in one run."""
    assert reader_script("README.md") == reader_script("docs/getting-started.md")
    assert ["README.md", "docs/getting-started.md"] in READS


def test_the_readme_and_getting_started_are_followed_from_their_set_up():
    assert {"README.md", "docs/getting-started.md"} <= set(RUNNABLE_PAGES)
    for page in ("README.md", "docs/getting-started.md"):
        script = reader_script(page)
        assert 'export PATH="$PWD/.venv/bin:$PATH"' in script, page
        assert script.index("export PATH") < script.index("tfrecord-suite ")
    with open(os.path.join(ROOT, "Makefile")) as fh:
        assert re.search(r"^venv: \$\(STAMP\)$", fh.read(), re.M)


PY_BLOCK = re.compile(r"```python\n(.*?)```", re.S)
PYTHON = [(_rel(page), code) for page in PAGES for code in PY_BLOCK.findall(open(page).read())]


@pytest.mark.parametrize(("page", "code"), PYTHON, ids=[f"{p}#{i}" for i, (p, _) in
                         enumerate(PYTHON)])  # fmt: skip
def test_every_python_block_compiles_and_its_pipelines_compile_with_kfp(page, code, tmp_path):
    """Every Python example runs as written (definitions only: nothing is submitted), and each
    pipeline it defines compiles with kfp's compiler with caching off where the steps' policy
    says (tfrecord_suite.kfp.step_policies.STEPS)."""
    from kfp import compiler
    from kfp.dsl import graph_component
    from support import cached_against_policy

    scope: dict = {}
    exec(compile(code, page, "exec", dont_inherit=True), scope)  # not this file's __future__
    pipelines = [v for v in scope.values() if isinstance(v, graph_component.GraphComponent)]
    for pipeline in pipelines:
        path = str(tmp_path / f"{pipeline.name}.yaml")
        compiler.Compiler().compile(pipeline, path)
        assert cached_against_policy(path) == [], f"{page}: {pipeline.name} caches them"


def test_there_are_python_examples_with_pipelines():
    pages = {page for page, code in PYTHON if "@dsl.pipeline" in code}
    assert {"README.md", "docs/how-to/components.md"} <= pages


def test_the_steps_named_uncached_are_the_policy():
    from tfrecord_suite.kfp.step_policies import STEPS

    text = open(os.path.join(ROOT, "docs", "how-to", "components.md")).read()
    named = re.search(r"caching \(off for (.*?):", text, re.S)[1]
    assert set(re.findall(r"`(\w+)`", named)) == {n for n, p in STEPS.items() if not p.cache}


def test_troubleshooting_covers_the_first_failures_and_quotes_real_messages():
    """The page covers image pulls, 403s, namespaces, Pending pods and storage credentials; the
    suite's messages it quotes are in the source, Google's is the installed library's own."""
    import inspect

    import google.auth._default as adc

    import tfrecord_suite.kfp.components as wrappers
    import tfrecord_suite.kfp.endpoint as endpoint

    text = open(os.path.join(ROOT, "docs", "troubleshooting.md")).read()
    flat = " ".join(text.split())
    headings = re.findall(r"^## (.+)$", text, re.M)
    for topic in ("image cannot be pulled", "403", "Namespace and profile", "Pending",
                  "Credentials for GCS"):  # fmt: skip
        assert any(topic in h for h in headings), topic
    with open(os.path.join(ROOT, "mkdocs.yml")) as fh:
        assert "troubleshooting.md" in fh.read()
    ours = " ".join(inspect.getsource(endpoint).split()) + " ".join(
        inspect.getsource(wrappers).split()
    )
    ours = ours.replace('" "', "").replace("%s", "...")
    for quoted in (
        "(check --auth and the token)",
        "is multi-user Kubeflow: give --namespace, your profile's namespace (in a pod, its own "
        "namespace is used)",
        "is standalone Kubeflow Pipelines, whose runs have no namespace",
        "runs the tfrecord-suite package and kfp, which this Python cannot import.",
    ):
        assert quoted in flat, quoted
        assert quoted in ours, quoted
    google = " ".join(adc._CLOUD_SDK_MISSING_CREDENTIALS.split())
    assert google in flat


def test_the_missing_values_named_are_the_ones_read_as_missing():
    from tfrecord_suite.schema import DEFAULT_NA_VALUES

    for page in ("docs/concepts/shard.md", "docs/how-to/your-data.md"):
        text = open(os.path.join(ROOT, page)).read()
        line = re.search(r"[^;|]*\bare missing", " ".join(text.split()))[0]
        named = set(re.findall(r"`([^`]+)`", line))
        assert named == set(DEFAULT_NA_VALUES) - {""}, page
        assert "empty" in line, page


def test_retrain_takes_the_flags_of_submit_the_page_says():
    import click

    from tfrecord_suite.cli.main import main

    def flags(name):
        cmd = main.get_command(click.Context(main), name)
        return {o for p in cmd.params if isinstance(p, click.Option) for o in p.opts}

    text = " ".join(open(os.path.join(ROOT, "docs", "how-to", "retraining.md")).read().split())
    but = re.search(r"It takes the flags of `submit` \([^)]*\) but (.*?), so the run", text)[1]
    assert set(re.findall(r"`(--[\w-]+)`", but)) == flags("submit") - flags("retrain")


def test_the_dag_diagrams_of_the_readme_and_home_page_are_the_pipelines():
    """Each arrow of the hand-drawn retraining DAG is a dependency of the compiled pipeline
    (report beside promote, not after it), and every step is drawn."""
    import yaml

    with open(os.path.join(ROOT, "pipelines", "retraining.yaml")) as fh:
        spec = next(yaml.safe_load_all(fh))
    tasks = spec["root"]["dag"]["tasks"]
    needs = {t: set(b.get("dependentTasks", [])) for t, b in tasks.items()}
    gate = next(t for t in tasks if "dag" in spec["components"][tasks[t]["componentRef"]["name"]])
    inner = spec["components"][tasks[gate]["componentRef"]["name"]]["dag"]["tasks"]
    needs.update({t: {"gate"} for t in inner})
    needs["gate"] = needs.pop(gate)

    def upstream(task):
        seen, todo = set(), [task]
        while todo:
            for dep in needs[todo.pop()] - seen:
                seen.add(dep)
                todo.append(dep)
        return seen

    for page in ("README.md", "docs/index.md"):
        (chart,) = re.findall(r"```mermaid\n(.*?)```", open(os.path.join(ROOT, page)).read(), re.S)
        nodes = [re.findall(r"(\w+)(?:\{\{\w+\}\})?", line) for line in chart.splitlines()[1:]]
        edges = {(a, b) for line in nodes for a, b in itertools.pairwise(line)}
        drawn = {n for line in nodes for n in line}
        assert drawn == set(needs), page
        for a, b in edges:
            assert a in upstream(b), f"{page}: {a} --> {b} is no dependency of the pipeline"


def test_the_size_the_pages_give_the_virtual_environment_is_its_size():
    """`make venv`'s environment is "about N GB" on the pages that say so (the bench's own
    extras, PyTorch and its CUDA wheels, left out: `make bench` adds them)."""
    bench_only = ("torch", "nvidia", "triton", "functorch")
    total = 0
    for folder, dirs, files in os.walk(sys.prefix):
        if os.path.basename(folder) == "site-packages":
            dirs[:] = [d for d in dirs if not d.startswith(bench_only)]
        total += sum(os.lstat(os.path.join(folder, f)).st_size for f in files)
    for page in ("README.md", "docs/getting-started.md"):
        (said,) = re.findall(r"about (\d+(?:\.\d+)?) GB", open(os.path.join(ROOT, page)).read())
        assert abs(total / 1e9 - float(said)) <= 0.6, (page, total / 1e9)


#: A measured figure in prose: a ratio (1.78x), a decimal (0.39), a size or share of a run
#: (348 MB, 5-9 %). Targets ("target 0.6") and a shard's record size are the benchmark's setup.
FIGURE = re.compile(r"(?<![\w.#/-])\d[\d,.]*(?:-\d[\d,.]*)?\s?(?:x\b|%|MB\b)|(?<![\w.])\d+\.\d+")


def test_the_prose_around_the_generated_results_quotes_no_figure_of_its_own():
    """Measured figures live in docs/bench, generated; the prose beside the generated table names
    the rows it means (a hand-written figure goes stale with the next run)."""
    perf = open(os.path.join(ROOT, "docs", "performance.md")).read()
    prose = {"docs/performance.md": perf.split("<!-- /bench-results -->", 1)[1]}
    for page in ("docs/how-to/gcs.md", "docs/how-to/s3.md"):
        # the "Measured" section around the network part's generated block
        measured = open(os.path.join(ROOT, page)).read().split("## Measured", 1)[1]
        measured = measured.split("## Proven here")[0]
        before, rest = measured.split("<!-- network-results:", 1)
        prose[page] = before + rest.split("<!-- /network-results -->", 1)[1]
    for page, text in prose.items():
        text = re.sub(r"`[^`]*`", "", " ".join(text.split()))  # names of files and flags
        text = re.sub(r"target (?:\(|of )?\d[\d.]*(?: at \d+ ms)?", "", text)
        text = re.sub(r"\b\d+ KB records?\b|~100 KB|~140 MB|1\.4 GB", "", text)  # the setup
        assert FIGURE.findall(text) == [], page


def test_the_files_mkdocs_yml_names_exist():
    with open(os.path.join(ROOT, "mkdocs.yml")) as fh:
        named = re.findall(r"\b((?:tests|docs|src)/[\w/.-]+\.(?:py|md|js))\b", fh.read())
    assert named and all(os.path.exists(os.path.join(ROOT, p)) for p in named), named


def test_the_readme_links_to_files_that_exist():
    """On GitHub the README's links open files of the repository: no page only the site builds,
    and no page GitHub shows as the site's directives (mkdocstrings' `::: module`) rather than
    their content."""
    text = open(os.path.join(ROOT, "README.md")).read()
    links = [t.split("#")[0] for t in re.findall(r"\]\(([^)]+)\)", text)]
    local = [t for t in links if t and not t.startswith(("http:", "https:"))]
    assert local and [t for t in local if not os.path.exists(os.path.join(ROOT, t))] == []
    pages = [t for t in local if t.endswith(".md")]
    built = [t for t in pages if re.search(r"^:::", open(os.path.join(ROOT, t)).read(), re.M)]
    assert built == []
    # the check above can fail: the API reference is such a page
    assert re.search(r"^::: ", open(os.path.join(ROOT, "docs/reference/api.md")).read(), re.M)
