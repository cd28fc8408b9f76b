"""The Kubeflow Pipelines UI in a real browser: a user uploads the retraining pipeline, runs it
and reads its results there.

Headless Chromium (Debian's, driven by Playwright for Python) opens the UI of KFP 2.17.0 on the
one-node cluster (``tests/cluster/kubeflow_pipelines.py``: upstream's ``ml-pipeline-ui`` built
here, in multi-user mode with ``ENABLE_AUTHZ=true`` and ``DEPLOYMENT=KUBEFLOW``) and does what a
user does: uploads the pipeline through the upload page's file chooser, creates a run through
the form with our parameters, watches the run list until the run shows Succeeded, opens the
run's graph (every step succeeded, the gate's sub-graph too) and every output artifact's
Visualization tab: the train step's scalar metrics and confusion matrix (each cell where
docs/how-to/kubeflow-ui.md says the UI puts it), the evaluation's metrics (numbers only), and
each Markdown report (the gate's decision among them) as the UI's own viewers render them from
ML Metadata and the object store. A second run of the same version then goes beside the first
in Compare runs, each scalar of both runs side by side. Any error banner on any of these pages
fails the test.

Two things of a Kubeflow deployment are not on the cluster, and the browser supplies them:

* **The user's identity.** In Kubeflow, Istio with oauth2-proxy authenticates the user and adds
  ``kubeflow-userid: <email>`` to every request reaching the UI (the header the UI's server reads,
  ``USERID_HEADER`` of ``pipeline-install-config``), and the UI's server hands it on to the API
  server, which authorizes it with a SubjectAccessReview. Here the browser sends that header for
  the profile's owner itself (Playwright's ``extra_http_headers``), exactly the header the proxy
  would add; everything after it is KFP's own.
* **The namespace.** In ``DEPLOYMENT=KUBEFLOW`` mode the UI learns its namespace only from the
  central dashboard: its index page loads ``/dashboard_lib.bundle.js`` (``frontend/server/
  handlers/index-html.ts``), which Kubeflow's gateway routes to the dashboard, and
  ``frontend/src/lib/KubeflowClient.tsx`` calls that library's
  ``CentralDashboardEventHandler.init`` and takes the namespace the dashboard selects
  (``onNamespaceSelected``). Without it the UI sends no namespace, and the API server refuses
  every list in multi-user mode (the run list shows "Error: failed to fetch runs", HTTP 400).
  The dashboard is not built here, so the browser answers that one request with a stand-in of
  the library that selects the profile's namespace at once, as the dashboard does for a user
  whose only profile it is. The UI, its server, the API server and ML Metadata are unchanged.

``TFRS_UI_SCREENSHOTS=FOLDER`` writes the screenshots the test takes (the graph, the metrics, the
confusion matrix, the reports) into FOLDER when it passes: ``docs/how-to/kubeflow-ui.md`` shows
them and says how to make them again.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.kfp,
    pytest.mark.ui,
    pytest.mark.slow,
    pytest.mark.timeout(3600),
]

#: Debian's Chromium (libraries that fetch a browser of their own cannot here)
CHROMIUM = Path("/usr/bin/chromium")
#: Headless, and nothing that calls Google's services: on this machine those connections are
#: refused, many at a time, and slow the browser down; a fresh profile each time (the user data
#: folder Playwright's persistent context is given)
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
#: Set to a folder: the screenshots are copied there when the test passes
SCREENSHOTS_ENV = "TFRS_UI_SCREENSHOTS"
#: The stand-in of the central dashboard's client library (see the module's docstring):
#: ``init(callback)`` hands the UI an event handler, then selects the namespace on it
DASHBOARD_LIBRARY = """
window.centraldashboard = {
  CentralDashboardEventHandler: {
    init(callback) {
      const handler = {};
      callback(handler, true);
      handler.onNamespaceSelected(%s);
    },
  },
};
"""
#: Error banners' background (frontend/src/Css.tsx ``color.errorBg``, Banner.tsx mode 'error')
ERROR_BANNER_JS = """() => [...document.querySelectorAll('div')]
  .filter(d => getComputedStyle(d).backgroundColor === 'rgb(251, 233, 231)')
  .map(d => d.innerText.trim())"""
#: What the Visualization tab shows for an artifact of each type (MetricsVisualizations.tsx):
#: a format string of the output's name
VIEWER_TEXT = {
    "system.Metrics": "Scalar Metrics: {}",
    "system.ClassificationMetrics": "Confusion Matrix: {}",
    "system.Markdown": "Static Markdown",
    "system.HTML": "Static HTML",
}
#: The UI's word for an artifact no viewer shows (a dataset, a model)
NO_VIEWER = "There is no metrics artifact available in this step."
#: Generous: on the 2-CPU node shared with other tests a run of this size took 3.5 to 4.5 min
RUN_TIMEOUT = 2400


# ------------------------------------------------------------------------------------ browser


def error_banners(page: Any) -> list[str]:
    """The text of every error banner on the page."""
    return page.evaluate(ERROR_BANNER_JS)


def assert_no_error_banner(page: Any, where: str) -> None:
    """Fail naming the page and the banners' text."""
    banners = error_banners(page)
    assert not banners, f"{where}: the UI shows an error: {banners}"


class Shots:
    """Screenshots of the test, kept in a folder of its own; copied to the folder
    :data:`SCREENSHOTS_ENV` names when the test passes."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)

    def take(self, page: Any, name: str) -> None:
        """``NAME.png`` of the page as it is now: the pointer moved off it (no tooltip), tabs'
        and ripples' transitions run to their end."""
        page.mouse.move(0, 0)
        page.screenshot(path=str(self.folder / f"{name}.png"), animations="disabled")

    def publish(self) -> None:
        """Copy every screenshot to ``$TFRS_UI_SCREENSHOTS``, if set."""
        target = os.environ.get(SCREENSHOTS_ENV)
        if target:
            Path(target).mkdir(parents=True, exist_ok=True)
            for png in sorted(self.folder.glob("*.png")):
                shutil.copy(png, Path(target) / png.name)


@pytest.fixture
def browser(kfp_profile: Any, tmp_path: Path) -> Iterator[Any]:
    """A page of headless Chromium that reaches the UI as the profile's owner would through
    Kubeflow: the identity header on every request, the namespace from the dashboard stand-in."""
    if not CHROMIUM.exists():
        message = f"no {CHROMIUM}: `apt-get install chromium` (make cluster-deps installs it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    from cluster import kubeflow_pipelines as kfp
    from playwright.sync_api import expect, sync_playwright

    library = DASHBOARD_LIBRARY % json.dumps(kfp_profile.namespace)
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"),
            executable_path=str(CHROMIUM),
            headless=True,
            args=CHROMIUM_ARGS,
            extra_http_headers={"kubeflow-userid": kfp.PROFILE_OWNER},
            viewport={"width": 1400, "height": 900},
        )
        context.set_default_timeout(60_000)
        # expect()'s own default is 5 s: on the 2-CPU node shared with the other worker's
        # runs, the run page took longer than that to load its run ("Currently loading run
        # information"); how fast the UI loads is not what these tests prove
        expect.set_options(timeout=60_000)
        context.route(
            f"{kfp_profile.ui}/dashboard_lib.bundle.js",
            lambda route: route.fulfill(content_type="text/javascript", body=library),
        )
        try:
            yield context.new_page()
        finally:
            context.close()


# ------------------------------------------------------------------------------- the pipeline


def compile_for_profile(profile: Any, output: Path) -> dict[str, Any]:
    """The retraining pipeline compiled as a user with a private registry compiles it for the
    UI: the cluster's registry and tag, the storage Secret, small steps. Its spec."""
    import yaml
    from cluster import kubeflow_pipelines as kfp

    argv = [
        sys.executable, "-m", "tfrecord_suite.cli", "compile", "--pipeline", "retraining",
        "--image-registry", profile.images.registry, "--image-tag", profile.images.tag,
        "--step-resources", kfp.SMALL_STEPS, "--storage-secret", kfp.STORAGE_SECRET,
        "--storage-secret-type", "s3-keys", "--output", str(output),
    ]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return next(yaml.safe_load_all(output.read_text()))


def dag_tasks(spec: dict[str, Any], component: str | None = None) -> dict[str, str]:
    """``task -> component`` of the root DAG, or of a sub-DAG's component."""
    dag = spec["components"][component]["dag"] if component else spec["root"]["dag"]
    return {name: task["componentRef"]["name"] for name, task in dag["tasks"].items()}


def output_artifacts(spec: dict[str, Any], tasks: dict[str, str]) -> dict[str, str]:
    """``artifact.TASK.OUTPUT -> type`` of these tasks' output artifacts (the graph's ids)."""
    out = {}
    for task, component in tasks.items():
        outputs = spec["components"][component].get("outputDefinitions", {}).get("artifacts", {})
        for name, definition in outputs.items():
            out[f"artifact.{task}.{name}"] = definition["artifactType"]["schemaTitle"]
    return out


# ---------------------------------------------------------------------------- what a user does


def upload(page: Any, ui: str, name: str, package: Path, shots: Shots) -> None:
    """Upload ``package`` as a new private pipeline ``name`` through the upload page."""
    from playwright.sync_api import expect

    page.goto(f"{ui}/#/pipelines")
    page.get_by_role("button", name="Upload pipeline").click()
    expect(page.get_by_text("Upload pipeline or pipeline version.")).to_be_visible()
    page.get_by_label("Upload a file").check()
    with page.expect_file_chooser() as chooser:
        page.get_by_role("button", name="Choose file", exact=True).click()
    chooser.value.set_files(str(package))
    page.locator("#newPipelineName").fill(name)
    assert_no_error_banner(page, "upload page")
    shots.take(page, "upload")
    page.locator("#createNewPipelineOrVersionBtn").click()
    page.wait_for_url("**/#/pipelines/details/**")
    expect(page.get_by_text(name).first).to_be_visible()
    assert_no_error_banner(page, "the uploaded pipeline")


def start_run(page: Any, experiment: str, name: str, parameters: dict[str, str]) -> str:
    """From the pipeline's page: create an experiment for it, then a run in it through the form
    the UI goes on to (the API server takes no run without an experiment in multi-user mode:
    "Experiment id can not be empty"); the run's id."""
    from playwright.sync_api import expect

    page.get_by_role("button", name="Create experiment").click()
    page.get_by_label("Experiment name").fill(experiment)
    page.get_by_role("button", name="Next").click()
    expect(page.get_by_text("Specify parameters required by the pipeline")).to_be_visible()
    page.get_by_label("Run name").fill(name)
    for key, value in parameters.items():
        page.locator(f'[id="{key}"]').fill(value)
    assert_no_error_banner(page, "new run form")
    start = page.locator("#startNewRunBtn")
    expect(start).to_be_enabled()
    start.click()
    page.wait_for_url("**/#/runs/details/**")
    return page.url.rsplit("/", 1)[-1]


def status_in_run_list(page: Any, ui: str, name: str) -> str:
    """The run's status as the run list shows it (its icon's tooltip), the list loaded anew;
    '' until the run is listed and done."""
    # going to the URL the page is at already changes nothing: the list would stay as it was
    with page.expect_response(lambda response: "/apis/v2beta1/runs?" in response.url):
        if page.url == f"{ui}/#/runs":
            page.reload()
        else:
            page.goto(f"{ui}/#/runs")
    row = page.locator('[data-testid="table-row"]', has_text=name)
    row.wait_for()
    assert_no_error_banner(page, "run list")
    row.locator('[data-testid="node-status-sign"]').hover()
    status = page.get_by_role("tooltip").inner_text().strip()
    return "" if status in ("Running", "Pending execution") else status


def open_node(page: Any, node_id: str) -> None:
    """Click a node of the run's graph (its side panel opens)."""
    page.locator(f'[data-testid="rf__node-{node_id}"]').click()


def close_panel(page: Any) -> None:
    """Close the side panel, which covers part of the graph."""
    page.get_by_role("button", name="close").click()


def assert_graph_succeeded(page: Any, tasks: dict[str, str]) -> None:
    """Every task of this layer of the graph is shown, each with the succeeded mark
    (ExecutionNode.tsx: CheckCircleIcon for COMPLETE)."""
    from playwright.sync_api import expect

    for task in tasks:
        node = page.locator(f'[data-testid="rf__node-task.{task}"]')
        expect(node).to_be_visible()
        expect(node.locator('[data-testid="CheckCircleIcon"]')).to_be_visible()


#: The compare page's tables as text: ``[table][row][cell]`` (CompareTable.tsx: a row of the
#: runs' names, one of ``execution > artifact`` per column, then a row per metric)
TABLES_JS = """() => [...document.querySelectorAll('table')].map(t =>
  [...t.rows].map(r => [...r.cells].map(c => c.innerText.trim())))"""


def compared_scalars(page: Any, ui: str, names: list[str]) -> dict[str, dict[str, list[str]]]:
    """Tick the runs ``names`` in the run list, press Compare runs; the Scalar Metrics tab's
    table as ``metric -> column (execution > artifact) -> the runs' values``, left to right."""
    from playwright.sync_api import expect

    page.goto(f"{ui}/#/runs")
    for name in names:  # the row whose run is named exactly so (one name begins the other)
        row = page.locator('[data-testid="table-row"]').filter(
            has=page.get_by_text(name, exact=True)
        )
        row.locator('input[type="checkbox"]').check()
    page.get_by_role("button", name="Compare runs").click()
    page.wait_for_url("**/#/compare?**")
    expect(page.get_by_role("button", name="Scalar Metrics")).to_be_visible()
    page.get_by_role("button", name="Scalar Metrics").click()
    table = page.locator("table", has_text="test_accuracy")
    expect(table).to_be_visible()
    assert_no_error_banner(page, "Compare runs")
    (rows,) = [t for t in page.evaluate(TABLES_JS) if any("test_accuracy" in r for r in t)]
    header = next(r for r in rows if any(" > " in c for c in r))
    by_metric: dict[str, dict[str, list[str]]] = {}
    for row in rows[rows.index(header) + 1 :]:
        metric, *values = row
        for column, value in zip(header[-len(values) :], values, strict=True):
            by_metric.setdefault(metric, {}).setdefault(column, []).append(value)
    return by_metric


def visualization(page: Any, node_id: str, kind: str, output: str) -> str:
    """Open an artifact's Visualization tab; the text its viewer shows."""
    from playwright.sync_api import expect

    open_node(page, node_id)
    page.get_by_role("button", name="Visualization").click()
    expected = VIEWER_TEXT[kind].format(output) if kind in VIEWER_TEXT else NO_VIEWER
    # SidePanel.tsx: the close button's row and the tab's content share a parent
    panel = page.get_by_role("button", name="close").locator("xpath=../..")
    expect(panel.get_by_text(expected).first).to_be_visible()
    if kind == "system.Markdown":  # rendered, not only fetched: each report has a title
        expect(panel.locator("h1").first).to_be_visible()
    assert_no_error_banner(page, f"{node_id} Visualization")
    return panel.inner_text()


# ------------------------------------------------------------------------------------ the test


def test_a_user_uploads_runs_and_inspects_the_retraining_pipeline_in_the_ui(
    kfp_profile: Any, browser: Any, tmp_path: Path
) -> None:
    from cluster import kubeflow_pipelines as kfp
    from playwright.sync_api import expect

    from realparts.processes import wait_for
    from tfrecord_suite import demo_data

    page, ui = browser, kfp_profile.ui
    shots = Shots(tmp_path / "screenshots")
    key = f"ui-{uuid.uuid4().hex[:8]}"
    # its own prefix: nothing of another run is a cache hit, the gate has no baseline yet
    root = f"{kfp_profile.root}/{key}"
    bucket, _, prefix = root.removeprefix("s3://").partition("/")
    s3 = kfp_profile.s3()
    csv = Path(demo_data.write_penguins(str(tmp_path / "penguins.csv")))
    s3.upload_file(str(csv), bucket, f"{prefix}/raw/penguins.csv")
    package = tmp_path / "retraining.yaml"
    spec = compile_for_profile(kfp_profile, package)
    try:
        upload(page, ui, f"tfrecord-suite-{key}", package, shots)
        run_name = f"retraining-{key}"
        run_id = start_run(
            page,
            f"tfrecord-suite-{key}",
            run_name,
            {
                "input_uri": f"{root}/raw/penguins.csv",
                "registry_root": f"{root}/registry",
                "model_registry": f"{root}/models",
                "dataset_name": "penguins",
                "label": "species",
                "epochs": "3",
            },
        )
        status = wait_for(
            lambda: status_in_run_list(page, ui, run_name),
            timeout=RUN_TIMEOUT,
            what=f"run {run_name} ({run_id}) done in the run list",
            interval=15,
        )
        assert status == "Executed successfully", f"run {run_id}: {status}"
        # the list as a user narrows it to the run (other tests' runs share the profile)
        page.get_by_label("Filter runs").fill(run_name)
        expect(page.locator('[data-testid="table-row"]')).to_have_count(1)
        shots.take(page, "runs")
        # a second run of the same pipeline version in the same experiment (through the API:
        # the shard step and training cached, the gate against the first run's model), started
        # now so that it runs while the browser reads the first
        from tfrecord_suite.kfp.endpoint import KfpEndpoint

        api = KfpEndpoint(kfp_profile.host, kfp_profile.namespace,
                          token_file=kfp_profile.token_file).client(kfp_profile.namespace)  # fmt: skip
        first = api.get_run(run_id)
        version = first.pipeline_version_reference
        again = api.run_pipeline(
            experiment_id=first.experiment_id, job_name=f"{run_name}-again",
            params=first.runtime_config.parameters, pipeline_id=version.pipeline_id,
            version_id=version.pipeline_version_id,
        )  # fmt: skip

        # the graph: every step succeeded, the gate's sub-graph (promote) too
        page.locator('[data-testid="table-row"]', has_text=run_name).get_by_text(run_name).click()
        page.wait_for_url(f"**/#/runs/details/{run_id}")
        root_tasks = dag_tasks(spec)
        assert_graph_succeeded(page, root_tasks)
        assert_no_error_banner(page, "run graph")
        shots.take(page, "graph")
        for task, component in root_tasks.items():
            inner = spec["components"][component].get("dag")
            if inner:
                page.locator(f'[data-testid="rf__node-task.{task}"]').locator(
                    '[data-testid="expand-button"]'
                ).click()
                assert_graph_succeeded(page, dag_tasks(spec, component))
                page.get_by_text("root", exact=True).click()

        # every output artifact as its viewer renders it
        shown, matrix = {}, []
        for node_id, kind in output_artifacts(spec, root_tasks).items():
            shown[node_id] = visualization(page, node_id, kind, node_id.rsplit(".", 1)[-1])
            if kind == "system.ClassificationMetrics":  # the matrix as drawn, cell by cell
                (matrix,) = [t for t in page.evaluate(TABLES_JS)
                             if any("True label" in r for r in t)]  # fmt: skip
            name = {
                "artifact.train.metrics": "metrics",
                "artifact.train.classification_metrics": "confusion-matrix",
                "artifact.train.report": "report",
                "artifact.report.summary": "summary",
            }.get(node_id)
            if name:
                shots.take(page, name)
            close_panel(page)

        # both runs side by side in Compare runs
        second = api.wait_for_run_completion(again.run_id, timeout=RUN_TIMEOUT)
        assert second.state == "SUCCEEDED", second.error
        compared = compared_scalars(page, ui, [run_name, f"{run_name}-again"])
        shots.take(page, "compare-runs")
    except BaseException:
        shots.take(page, "failure")  # the page as it was, beside the test's other screenshots
        raise
    finally:
        for listed in s3.get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix=f"{prefix}/"
        ):
            for item in listed.get("Contents", []):
                s3.delete_object(Bucket=bucket, Key=item["Key"])

    metrics = shown["artifact.train.metrics"]
    for metric in ("test_accuracy", "validation_accuracy", "examples_per_second"):
        assert metric in metrics, metrics
    assert "display_name" not in metrics and "store_session_info" not in metrics
    confusion = shown["artifact.train.classification_metrics"]
    assert all(c in confusion for c in ("Adelie", "Chinstrap", "Gentoo")), confusion
    # what docs/how-to/kubeflow-ui.md says the UI draws: the true class along the columns (x
    # axis, "True label", left to right), the predicted class up the rows (y axis, "Predicted
    # label", the first class at the bottom), each cell the logged matrix's [true][predicted]
    from realparts import mlmd

    executions = mlmd.run_lineage(ui, run_id, {"kubeflow-userid": kfp.PROFILE_OWNER})["executions"]
    logged = next(e for e in executions if e["name"] == "Train (tf.distribute)")["outputs"][
        "classification_metrics"]["properties"]["confusionMatrix"]["struct"]  # fmt: skip
    classes = [a["displayName"] for a in logged["annotationSpecs"]]
    counts = [[int(v) for v in r["row"]] for r in logged["rows"]]  # [true][predicted]
    n = len(classes)
    assert matrix[0] == ["Predicted label"], matrix
    assert matrix[-1][1 : n + 1] == classes and matrix[-1][-1] == "True label", matrix
    body = matrix[1:-1]
    assert [row[0] for row in body] == classes[::-1], matrix
    for r, row in enumerate(body):
        for c, cell in enumerate(row[1 : n + 1]):
            assert int(cell) == counts[c][n - 1 - r], (r, c, matrix, counts)
    evaluation = shown["artifact.evaluate.evaluation"]  # numbers only: no quoted string
    assert "candidate_accuracy" in evaluation and '"' not in evaluation, evaluation
    assert "Training report: penguins@1.0.0" in shown["artifact.train.report"]
    assert "Model gate: promote" in shown["artifact.evaluate.decision"]
    # Compare runs: each scalar of both runs side by side, every value a number
    columns = {"> metrics": ("test_accuracy", "validation_accuracy", "examples_per_second",
                                   "test_loss"),
               "> evaluation": ("candidate_accuracy",)}  # fmt: skip
    for column, metrics in columns.items():
        for metric in metrics:
            values = next(v for c, v in compared[metric].items() if c.endswith(column))
            assert len(values) == 2 and all(float(v) >= 0 for v in values), (metric, compared)
    # the second run's gate had a baseline: the first run's model, scored on the same split
    baseline = next(
        v for c, v in compared["baseline_accuracy"].items() if c.endswith("> evaluation")
    )
    assert [v for v in baseline if v] and all(float(v) for v in baseline if v), compared
    for metric, by_column in compared.items():
        for column, values in by_column.items():
            for value in values:  # a number, or empty where a run has no such metric
                assert not value or float(value) >= 0, (metric, column, values)
    summary = shown["artifact.report.summary"]
    assert "test_accuracy" in summary and "store_session_info" not in summary, summary
    shots.publish()
