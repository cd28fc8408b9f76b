"""The bench's orchestration part (``--only orchestration``): what Kubeflow Pipelines costs.

The data pipeline (fingerprint -> shard -> version) on the same small real input, the penguins
table in the one-node cluster's object store (``make cluster-up``; tests/cluster/), run two ways,
alternately after a warm-up of each:

* ``kfp.local``: through ``kfp.local``'s SubprocessRunner in this environment, as ``make demo``
  runs the retraining pipeline (each step a process of its own on this machine; artifacts on
  local disk); timed from the pipeline's call to its return;
* ``cluster``: submitted with ``tfrecord-suite submit`` to the cluster's Kubeflow Pipelines 2.17.0
  as a user of its profile submits it (the suite's image under the cluster's registry, the
  profile's storage Secret, small step requests), timed from the run's creation (the backend's
  record, to the second) to the API first reporting it SUCCEEDED (polled every :data:`POLL_S`).

Both read the same CSV and publish into the same store (registries of their own), so the ratio
is the orchestration's cost. Where the cluster run's time goes is read back from what the cluster
recorded (:func:`capture`, :func:`breakdown`): every pod's creation, the scheduler's Scheduled
event, the kubelet's Pulled events and the log lines of each container, timed by the container
runtime. Per step: the KFP driver's pod, then the executor's pod: scheduling, the sandbox and
Argo's init container, KFP's launcher copied in by its init container, the main container's start,
the launcher's phases around the step (from its own log lines: its execution record and inputs,
the step's code, uploading the outputs and publishing them to ML Metadata, the DAG's state after
it), and Argo's wait container saving the log; and the gaps between pods, where Argo's workflow
controller notices a pod has ended and creates the next.

What it cannot see: the run's creation and the pods' are kept to the second by KFP and Kubernetes
(a phase next to one is off by up to a second; the launcher's phases, from log lines, are not);
the images are preloaded into the node's containerd (``make cluster-up`` loads them), so no
registry pull is measured, and the Pulled events say "already present"; what the step's code
spends its time on (imports, reading, writing); one node on a shared 2-core machine, where other
tests may use the cluster at the same time.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from typing import Any

from benchmarks.core import BenchConfig, Drained, Part, measure

_LOG = logging.getLogger(__name__)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(ROOT, "tests")
#: The pipeline measured.
PIPELINE = "data"
#: Seconds between the polls of the run's state (the end's resolution).
POLL_S = 1.0
#: A cluster run taking longer than this fails the part.
RUN_TIMEOUT_S = 1200
#: The annotation Argo puts on each pod: the workflow node it runs.
NODE_ANNOTATION = "workflows.argoproj.io/node-name"
#: Log lines the breakdown reads, by what their text contains: the first line of KFP's Python
#: executor (kfp/dsl/executor_main.py logs through "[KFP Executor ...]"), and KFP 2.17.0's
#: launcher (backend/src/v2/component/launcher_v2.go) reading the step's output once its process
#: has ended, and having published the execution to ML Metadata.
EXECUTOR = "[KFP Executor "
OUTPUT = "] ExecutorOutput:"
PUBLISHED = "] publish success."
#: The events kept of each pod.
EVENTS = ("Scheduled", "Pulling", "Pulled")
#: The kubelet's event for an image it did not pull (pkg/kubelet/images/image_manager.go).
PRESENT = "already present on machine"
_PULLED = re.compile(r'Successfully pulled image "([^"]+)" in ([0-9.a-zµ]+)')
_GO_DURATION = re.compile(r"([0-9.]+)(h|ms|m|s|µs|us|ns)")
_GO_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "µs": 1e-6, "us": 1e-6, "ns": 1e-9}
#: The executor pod's phases in order (each from the end of the one before), and what each is.
EXECUTOR_PHASES = {
    "scheduling": "executor pods: created -> scheduled",
    "sandbox": "executor pods: sandbox, Argo's init container",
    "launcher_copy": "executor pods: KFP launcher copied in (init container), main container start",
    "launcher_before": "launcher before the step (its execution in ML Metadata, cache, inputs, "
    "the step's process start)",
    "user_code": "the step's code",
    "upload_publish": "launcher: outputs uploaded, execution published to ML Metadata",
    "launcher_after": "launcher after publishing (the DAG's state in ML Metadata, exit)",
    "pod_end": "executor pods: Argo's wait container saves the log",
}


def run(data_root: str, root: str, config: BenchConfig) -> dict[str, Any]:
    """The data pipeline through kfp.local and on the cluster, alternately."""
    return {"orchestration": orchestration_part(root, config)}


def _cluster() -> Any:
    """The running one-node cluster with Kubeflow Pipelines, or a clear error."""
    from tfrecord_suite.errors import UserError

    if TESTS not in sys.path:
        sys.path.insert(0, TESTS)
    from cluster import kubeflow_pipelines as kfp
    from cluster.bringup import Cluster

    cluster = Cluster.load()
    if cluster is None or not cluster.pids or not all(cluster.alive().values()):
        raise UserError(
            "the orchestration part needs the one-node cluster with Kubeflow Pipelines running: "
            "`make cluster-up` (docs/how-to/one-node-cluster.md)"
        )
    missing = [step.name for step in kfp.step_policies() if step.name not in cluster.steps]
    if missing:
        raise UserError(
            f"the one-node cluster lacks {', '.join(missing)}: `make cluster-up` installs "
            "Kubeflow Pipelines (unless told --no-kfp)"
        )
    return cluster


def orchestration_part(root: str, config: BenchConfig) -> dict[str, Any]:
    """Both ways, alternately after a warm-up; the wall times, and the cluster runs' records."""
    from tfrecord_suite import demo_data
    from tfrecord_suite.kfp.compile import build

    cluster = _cluster()
    folder = os.path.join(root, "orchestration")
    os.makedirs(folder, exist_ok=True)
    from pathlib import Path

    from cluster import kubeflow_pipelines as kfp

    # as the kfp_profile fixture sets it up, but for the launcher's Role (no train step here)
    profile = kfp.user_profile(cluster, Path(folder), overlay=False)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
    prefix = f"{profile.root}/bench-orchestration/{stamp}"
    bucket, _, key = prefix.removeprefix("s3://").partition("/")
    csv_path = demo_data.write_penguins(os.path.join(folder, "penguins.csv"))
    profile.s3().upload_file(csv_path, bucket, f"{key}/penguins.csv")
    with open(csv_path) as fh:
        rows = sum(1 for _ in fh) - 1
    pipeline = build(PIPELINE)
    local: list[dict[str, Any]] = []
    remote: list[dict[str, Any]] = []

    def params(way: str, calls: list) -> dict[str, str]:
        return {
            "input_uri": f"{prefix}/penguins.csv",
            "registry_root": f"{prefix}/{way}-{len(calls)}",
            "dataset_name": "penguins",
        }

    def on_local() -> Drained:
        with tempfile.TemporaryDirectory(dir=folder) as work:
            local.append(run_local(pipeline, params("local", local), work, profile.store))
        return Drained(1, 0, 0.0, seconds=local[-1]["seconds"])

    def on_cluster() -> Drained:
        remote.append(run_cluster(profile, params("cluster", remote), folder))
        return Drained(1, 0, 0.0, seconds=remote[-1]["seconds"])

    try:
        measure({"kfp.local": on_local, "cluster": on_cluster}, config.runs())
    finally:
        os.remove(profile.token_file)  # the profile's key to the API: not left behind
    local, remote = local[1:], remote[1:]  # the warm-up's first
    median = statistics.median(r["seconds"] for r in remote)
    typical = min(remote, key=lambda r: abs(r["seconds"] - median))
    local_median = statistics.median(r["seconds"] for r in local)
    typical_local = min(local, key=lambda r: abs(r["seconds"] - local_median))
    return {
        "pipeline": PIPELINE,
        "rows": rows,
        "runs": len(remote),
        "backend": typical["backend"],
        "local": {
            "median_s": local_median,
            "runs_s": [r["seconds"] for r in local],
            "steps_s": typical_local["steps_s"],
        },
        "cluster": {
            "median_s": median,
            "runs_s": [r["seconds"] for r in remote],
            "submit_s": statistics.median(r["submit_s"] for r in remote),
            "run_id": typical["record"]["run_id"],
            "breakdown": breakdown(typical["record"]),
            "phases_s": [breakdown(r["record"])["phases"] for r in remote],
        },
    }


def run_local(
    pipeline: Any, params: dict[str, str], work: str, store: dict[str, str]
) -> dict[str, Any]:
    """The pipeline through kfp.local's SubprocessRunner; its wall time and each step's seconds.

    The store's keys are in the environment its steps inherit; the steps' seconds are as
    ``tfrecord-suite run`` reports them (from kfp.local's start and end lines).
    """
    from kfp import local
    from kfp.local import config as local_config

    from tfrecord_suite.io import storage
    from tfrecord_suite.kfp.local_run import StepReporter

    env = {k: v for k, v in store.items() if k.startswith("AWS_")}
    before = local_config.LocalExecutionConfig.instance
    local.init(
        runner=local.SubprocessRunner(use_venv=False),
        pipeline_root=os.path.join(work, "pipeline_root"),
        raise_on_error=True,
    )
    try:
        with (
            open(os.path.join(work, "kfp-local.log"), "w") as log,
            storage.environment(env),
            warnings.catch_warnings(),
        ):
            warnings.simplefilter("ignore")  # kfp.local's per-step notes on Kubernetes settings
            reporter = StepReporter(log, lambda line: _LOG.info("kfp.local %s", line))
            with contextlib.redirect_stdout(reporter):
                started = time.perf_counter()
                pipeline(**params)
                seconds = time.perf_counter() - started
    finally:
        local_config.LocalExecutionConfig.instance = before
    return {"seconds": seconds, "steps_s": {s["step"]: s["seconds"] for s in reporter.steps}}


def run_cluster(profile: Any, params: dict[str, str], folder: str) -> dict[str, Any]:
    """Submit the pipeline as a user does (test_kfp's ``submit``) and poll it until it ends.

    Returns:
        The run's seconds from its creation to SUCCEEDED, the submission's before it, the
        backend's version, and what the cluster recorded of the run (:func:`capture`, also
        saved beside the results as ``run-<id>.json``).

    """
    from cluster import kubeflow_pipelines as kfp

    from realparts import mlmd
    from tfrecord_suite.kfp.endpoint import KfpEndpoint

    argv = [sys.executable, "-m", "tfrecord_suite.cli", "submit", *profile.submit_args(PIPELINE)]
    argv += [arg for k, v in params.items() for arg in ("--param", f"{k}={v}")] + ["--json"]
    started = time.time()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"submit failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    summary = json.loads(proc.stdout[proc.stdout.index("{") :])
    client = KfpEndpoint(profile.host, profile.namespace, token_file=profile.token_file).client(
        profile.namespace
    )
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while True:
        got = client.get_run(summary["run_id"])
        state = str(got.state)
        if state in ("SUCCEEDED", "FAILED", "CANCELED", "SKIPPED") or time.monotonic() > deadline:
            break
        time.sleep(POLL_S)
    seen = time.time()
    if state != "SUCCEEDED":
        raise RuntimeError(f"cluster run {summary['run_id']} ended {state}")
    created = got.created_at.timestamp()
    record = capture(profile.cluster.api_client(), profile.namespace, summary["run_id"])
    lineage = mlmd.run_lineage(
        profile.ui, summary["run_id"], {"kubeflow-userid": kfp.PROFILE_OWNER}
    )
    record |= {
        "created": _iso(created),
        "succeeded": _iso(seen),
        "steps": {
            e["properties"]["task_name"]: {"name": e["name"], "state": e["state"]}
            for e in lineage["executions"]
            if e["name"]
        },
    }
    cached = [task for task, step in record["steps"].items() if step["state"] != "COMPLETE"]
    if cached:
        raise RuntimeError(f"run {summary['run_id']}: steps {cached} did not run (cached?)")
    with open(os.path.join(folder, f"run-{summary['run_id']}.json"), "w") as fh:
        json.dump(record, fh, indent=1)
    return {
        "seconds": seen - created,
        "submit_s": created - started,
        "backend": summary["backend"],
        "record": record,
    }


# ------------------------------------------------------------------- what the cluster recorded


def _iso(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat().replace("+00:00", "Z")


def _kept(lines: list[str]) -> list[str]:
    """The log lines the breakdown reads, each cut to 200 characters.

    The first and the last, the executor's first, and the launcher's markers.
    """
    kept = [i for i, line in enumerate(lines) if OUTPUT in line or PUBLISHED in line]
    first_executor = next((i for i, line in enumerate(lines) if EXECUTOR in line), None)
    keep = {0, len(lines) - 1, *kept} | ({first_executor} if first_executor is not None else set())
    return [lines[i][:200] for i in sorted(keep) if lines]


def capture(api: Any, namespace: str, run_id: str) -> dict[str, Any]:
    """What the cluster recorded of a run, as plain data (the breakdown's input).

    Each of its pods (KFP labels them with the run's id) with its creation, Argo's node, its
    events of :data:`EVENTS` and each container's image, status times and the log lines the
    breakdown reads (:func:`_kept`), timestamped by the container runtime.
    """
    from kubernetes import client

    core = client.CoreV1Api(api)

    def raw(response: Any) -> Any:
        return json.loads(response.data)

    listed = core.list_namespaced_pod(
        namespace, label_selector=f"pipeline/runid={run_id}", _preload_content=False
    )
    pods: dict[str, dict[str, Any]] = {}
    for pod in raw(listed)["items"]:
        meta, status = pod["metadata"], pod["status"]
        containers = {}
        for c in [*status.get("initContainerStatuses", []), *status.get("containerStatuses", [])]:
            ended = c["state"].get("terminated", {})
            log = core.read_namespaced_pod_log(
                meta["name"], namespace, container=c["name"], timestamps=True,
                _preload_content=False,
            ).data.decode(errors="replace")  # fmt: skip
            containers[c["name"]] = {
                "image": c["image"],
                "started": ended.get("startedAt"),
                "finished": ended.get("finishedAt"),
                "lines": _kept(log.splitlines()),
            }
        pods[meta["uid"]] = {
            "name": meta["name"],
            "created": meta["creationTimestamp"],
            "node": meta["annotations"][NODE_ANNOTATION],
            "containers": containers,
            "events": [],
        }
    events = core.list_namespaced_event(
        namespace, field_selector="involvedObject.kind=Pod", _preload_content=False
    )
    for event in raw(events)["items"]:
        pod = pods.get(event["involvedObject"].get("uid", ""))
        if pod is not None and event["reason"] in EVENTS:
            when = event.get("eventTime") or event.get("firstTimestamp")
            pod["events"].append(
                {"reason": event["reason"], "time": when, "message": event["message"]}
            )
    return {
        "run_id": run_id,
        "namespace": namespace,
        "pods": sorted(pods.values(), key=lambda p: (p["created"], p["name"])),
    }


# ------------------------------------------------------------------------------- the breakdown


def _t(stamp: str) -> float:
    """Seconds since the epoch of an RFC 3339 time (Kubernetes', or a log line's)."""
    return dt.datetime.fromisoformat(stamp).timestamp()


def _line_time(lines: list[str], marker: str = "", last: bool = False) -> float:
    """The time of the first line (the last with ``last``) holding ``marker``."""
    found = [line for line in lines if marker in line]
    if not found:
        raise ValueError(f"no log line with {marker!r}")
    return _t(found[-1 if last else 0].split(" ", 1)[0])


def _go_seconds(text: str) -> float:
    """A Go duration (``1.5s``, ``812ms``, ``1m2s``) in seconds."""
    return sum(float(n) * _GO_UNITS[unit] for n, unit in _GO_DURATION.findall(text))


def _node(name: str) -> tuple[str, str]:
    """``(task, kind)`` of one of KFP's Argo node names.

    ``...root(0).shard(0).executor(0)`` is shard's executor, ``...root(0).shard-driver(0)`` its
    driver, ``...root-driver(0)`` the pipeline's DAG driver.
    """
    parts = [re.sub(r"\(\d+\)$", "", p) for p in name.split(".")]
    if parts[-1] == "executor":
        return parts[-2], "executor"
    task = parts[-1].removesuffix("-driver")
    return task, "dag driver" if len(parts) <= 2 or task == "root" else "driver"


def _pod_phases(pod: dict[str, Any]) -> dict[str, float]:
    """A pod's phases in seconds, in order.

    They add up to its creation -> its end (the last line of Argo's wait container, which ends
    after the main one).
    """
    created = _t(pod["created"])
    containers = pod["containers"]
    end = _line_time(containers["wait"]["lines"], last=True)
    if "kfp-launcher" not in containers:  # a driver's pod
        return {"driver": end - created}
    main = containers["main"]["lines"]
    scheduled = next((_t(e["time"]) for e in pod["events"] if e["reason"] == "Scheduled"), created)
    marks = [
        created,
        scheduled,
        _line_time(containers["kfp-launcher"]["lines"]),
        _line_time(main),
        _line_time(main, EXECUTOR),
        _line_time(main, OUTPUT),
        _line_time(main, PUBLISHED),
        _line_time(main, last=True),
        end,
    ]
    return {name: b - a for name, a, b in zip(EXECUTOR_PHASES, marks[:-1], marks[1:], strict=True)}


def _images(pods: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per image: how often the kubelet found it present, and the pulls' seconds otherwise."""
    out: dict[str, dict[str, Any]] = {}
    for pod in pods:
        for event in pod["events"]:
            if event["reason"] != "Pulled":
                continue
            pulled = _PULLED.search(event["message"])
            image = pulled[1] if pulled else event["message"].split('"')[1]
            seen = out.setdefault(image, {"present": 0, "pulled_s": []})
            if pulled:
                seen["pulled_s"].append(_go_seconds(pulled[2]))
            elif PRESENT in event["message"]:
                seen["present"] += 1
    return out


def breakdown(record: dict[str, Any]) -> dict[str, Any]:
    """Where a cluster run's time went, from what :func:`capture` recorded of it.

    Returns:
        ``total_s`` (the run's creation to SUCCEEDED reported); ``phases``: seconds of each
        phase of the whole run, adding up to the total (the drivers' pods, each executor phase
        of :data:`EXECUTOR_PHASES` summed over the steps, the gaps where no pod of the run
        existed, before the first pod and after the last, and, where pods overlapped, the time
        counted twice, subtracted); ``steps``: per step, in order, its driver's pod and its
        executor's phases, the gaps before them, and its display name; ``images``: per image,
        the kubelet's Pulled events (found present, or pulled and in how long).

    """
    pods = []
    for pod in record["pods"]:
        task, kind = _node(pod["node"])
        phases = _pod_phases(pod)
        start = _t(pod["created"])
        pods.append({"task": task, "kind": kind, "start": start,
                     "end": start + sum(phases.values()), "phases": phases})  # fmt: skip
    pods.sort(key=lambda p: p["start"])
    created, done = _t(record["created"]), _t(record["succeeded"])
    covered_to = pods[0]["start"]
    union = gaps = 0.0
    for pod in pods:
        pod["gap_before"] = max(0.0, pod["start"] - covered_to)
        gaps += pod["gap_before"]
        union += max(0.0, pod["end"] - max(pod["start"], covered_to))
        covered_to = max(covered_to, pod["end"])
    phases: dict[str, float] = {"before_first_pod": pods[0]["start"] - created}
    phases["dag_driver"] = sum(p["phases"]["driver"] for p in pods if p["kind"] == "dag driver")
    phases["driver"] = sum(p["phases"]["driver"] for p in pods if p["kind"] == "driver")
    for name in EXECUTOR_PHASES:
        phases[name] = sum(p["phases"].get(name, 0.0) for p in pods)
    phases["gaps"] = gaps
    phases["after_last_pod"] = done - covered_to
    overlap = sum(p["end"] - p["start"] for p in pods) - union
    if overlap > 1e-9:
        phases["overlap"] = -overlap
    steps: dict[str, dict[str, Any]] = {}
    for pod in pods:
        if pod["kind"] == "dag driver":
            continue
        step = steps.setdefault(pod["task"], {"name": "", "attempts": 0, "gaps": 0.0})
        step["name"] = record.get("steps", {}).get(pod["task"], {}).get("name", pod["task"])
        step["gaps"] += pod["gap_before"]
        if pod["kind"] == "driver":
            step["driver"] = step.get("driver", 0.0) + pod["phases"]["driver"]
        else:
            step["attempts"] += 1
            for name, seconds in pod["phases"].items():
                step[name] = step.get(name, 0.0) + seconds
    return {
        "total_s": done - created,
        "phases": phases,
        "steps": steps,
        "images": _images(record["pods"]),
    }


# ---------------------------------------------------------------------------------- the report

#: What each phase of :func:`breakdown` is, as the report names it.
PHASES = {
    "before_first_pod": "run created -> first pod (the API server's Argo Workflow, Argo's start)",
    "dag_driver": "the pipeline's DAG driver (KFP driver pod, created to ended)",
    "driver": "each step's KFP driver pod (created to ended)",
    **EXECUTOR_PHASES,
    "gaps": "gaps between pods (Argo noticing a pod ended and creating the next)",
    "after_last_pod": "last pod ended -> SUCCEEDED reported (Argo, the persistence agent, "
    f"a {POLL_S:g} s poll)",
    "overlap": "pods overlapping (counted twice above)",
}
RATIO = "data pipeline wall time: cluster's Kubeflow Pipelines/kfp.local"


def ratios(results: dict[str, Any]) -> dict[str, float]:
    """The cluster run against kfp.local, when the results have the part."""
    part = results.get("orchestration")
    if not part:
        return {}
    return {RATIO: part["cluster"]["median_s"] / part["local"]["median_s"]}


def _images_line(images: dict[str, dict[str, Any]]) -> str:
    present = sum(i["present"] for i in images.values())
    pulls = {name: i["pulled_s"] for name, i in images.items() if i["pulled_s"]}
    line = (
        f"Images: the kubelet's Pulled events found every image already present on the node "
        f"({present} containers, {len(images)} images)"
        if not pulls
        else "Images pulled: "
        + ", ".join(f"`{n}` {len(s)}x, {sum(s):.1f} s" for n, s in sorted(pulls.items()))
    )
    return (
        line + ": `make cluster-up` loads them into the node's containerd, so no pull from a "
        "registry is measured here; on a real cluster a node pulls each image once, on the "
        "first pod that needs it."
    )


def tables(results: dict[str, Any]) -> list[str]:
    """The wall times side by side, and where the cluster run's time went."""
    part = results.get("orchestration")
    if not part:
        return []
    local, cluster = part["local"], part["cluster"]
    b = cluster["breakdown"]
    lines = [
        f"**Orchestration: the {part['pipeline']} pipeline on the one-node cluster's Kubeflow "
        f"Pipelines {part['backend']} against kfp.local** (the penguins table, {part['rows']} "
        f"rows, read from the cluster's object store by both and published into it; medians of "
        f"{part['runs']} runs each, alternating after a warm-up; on a shared 2-core machine "
        "where other tests used the same cluster meanwhile, so the seconds are noisy: the ratio "
        "measured side by side in one run, and the breakdown, are what to read)",
        "",
        "| way | wall time | relative to kfp.local |",
        "|---|---:|---:|",
        f"| kfp.local (SubprocessRunner, this machine) | {local['median_s']:.1f} s | 1.00 |",
        f"| cluster (run created -> SUCCEEDED) | {cluster['median_s']:.1f} s | "
        f"{cluster['median_s'] / local['median_s']:.2f} |",
        "",
        f"`tfrecord-suite submit` started {cluster['submit_s']:.1f} s before the backend "
        "recorded the run as created (compiling, finding the pipeline's version, creating the "
        "run), not counted above.",
        "",
        "**Where the cluster run's time goes** (its median run; the backend records the run's "
        "creation and Kubernetes the pods' to the second, so a phase next to one is off by up to "
        "a second; the launcher's phases are from its log lines, to the millisecond)",
        "",
        "| phase | seconds | share |",
        "|---|---:|---:|",
    ]
    for name, seconds in b["phases"].items():
        lines.append(f"| {PHASES[name]} | {seconds:.1f} | {seconds / b['total_s']:.0%} |")
    lines += [
        f"| **total** | **{b['total_s']:.1f}** | 100% |",
        "",
        "| step | driver pod | executor pod start | launcher around the step | the step's code "
        "| kfp.local's step | pod end | gaps before |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for task, s in b["steps"].items():
        start = s["scheduling"] + s["sandbox"] + s["launcher_copy"]
        around = s["launcher_before"] + s["upload_publish"] + s["launcher_after"]
        ran = local["steps_s"].get(task)
        cells = [f"{s['name']} (`{task}`)", f"{s.get('driver', 0.0):.1f} s", f"{start:.1f} s",
                 f"{around:.1f} s", f"{s['user_code']:.1f} s",
                 "" if ran is None else f"{ran:.1f} s", f"{s['pod_end']:.1f} s",
                 f"{s['gaps']:.1f} s"]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, "", _images_line(b["images"]), ""]


PART = Part("orchestration", ("orchestration",), run, ratios=ratios, tables=tables)
