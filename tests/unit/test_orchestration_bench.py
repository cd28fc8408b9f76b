"""The orchestration bench's breakdown (benchmarks/orchestration.py), on what the one-node
cluster recorded of a real run of the data pipeline on Kubeflow Pipelines 2.17.0
(tests/unit/data/kfp-data-run.json: the record ``capture`` made during the committed bench run,
its pods, their events and the log lines the breakdown reads)."""

import copy
import json
import os

import pytest

from benchmarks import orchestration, run

RECORD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "kfp-data-run.json")


@pytest.fixture
def record():
    with open(RECORD) as fh:
        return json.load(fh)


def _line_time(pod, container, marker=""):
    line = next(line for line in pod["containers"][container]["lines"] if marker in line)
    return orchestration._t(line.split(" ", 1)[0])


def test_the_phases_add_up_to_the_run_from_its_creation_to_succeeded(record):
    b = orchestration.breakdown(record)
    total = orchestration._t(record["succeeded"]) - orchestration._t(record["created"])
    assert b["total_s"] == pytest.approx(total)
    assert sum(b["phases"].values()) == pytest.approx(total)
    assert list(b["phases"]) == [name for name in orchestration.PHASES if name != "overlap"]
    assert all(seconds >= 0 for seconds in b["phases"].values()), b["phases"]
    assert b["phases"]["gaps"] > 0 and b["phases"]["dag_driver"] > 0  # Argo's and KFP's own


def test_each_step_is_its_driver_pod_and_its_executor_pod_phase_by_phase(record):
    b = orchestration.breakdown(record)
    assert list(b["steps"]) == ["fingerprint", "shard", "version"]  # the pipeline's order
    names = {task: step["name"] for task, step in record["steps"].items()}
    for task, step in b["steps"].items():
        assert step["name"] == names[task] and step["attempts"] == 1
        assert step["driver"] > 0 and set(orchestration.EXECUTOR_PHASES) <= set(step)
    # the step's code: from the executor's first line to the launcher reading its output
    (shard,) = [p for p in record["pods"] if p["node"].endswith(".shard(0).executor(0)")]
    code = _line_time(shard, "main", orchestration.OUTPUT) - _line_time(
        shard, "main", orchestration.EXECUTOR
    )
    assert b["steps"]["shard"]["user_code"] == pytest.approx(code)
    assert b["steps"]["shard"]["user_code"] == max(s["user_code"] for s in b["steps"].values())
    # the executor pod's start: created (to the second) -> the main container's first line
    start = sum(b["steps"]["shard"][k] for k in ("scheduling", "sandbox", "launcher_copy"))
    assert start == pytest.approx(_line_time(shard, "main") - orchestration._t(shard["created"]))
    # every pod, driver or executor, and the gaps between them tile the run
    pods = sum(b["phases"][k] for k in ("dag_driver", "driver", *orchestration.EXECUTOR_PHASES))
    steps = sum(s["driver"] + sum(s[k] for k in orchestration.EXECUTOR_PHASES)
                for s in b["steps"].values())  # fmt: skip
    assert steps == pytest.approx(pods - b["phases"]["dag_driver"])


def test_images_already_present_are_told_apart_from_a_pull(record):
    images = orchestration.breakdown(record)["images"]
    assert "registry.tfrs.test/ml/tfrecord-suite:cluster" in images
    assert all(i["present"] > 0 and i["pulled_s"] == [] for i in images.values()), images
    pulled = copy.deepcopy(record)
    event = next(e for e in pulled["pods"][0]["events"] if e["reason"] == "Pulled")
    image = event["message"].split('"')[1]
    # the kubelet's event for a pull (pkg/kubelet/images/image_manager.go)
    event["message"] = (
        f'Successfully pulled image "{image}" in 1m2.5s (1m2.5s including waiting). '
        "Image size: 1234 bytes."
    )
    again = orchestration.breakdown(pulled)["images"][image]
    assert again["pulled_s"] == [62.5] and again["present"] == images[image]["present"] - 1
    assert orchestration._go_seconds("812ms") == pytest.approx(0.812)


def test_argo_node_names_name_the_task_and_the_pod_s_kind():
    assert orchestration._node("wf(0).root(0).shard(0).executor(0)") == ("shard", "executor")
    assert orchestration._node("wf(0).root(0).shard-driver(0)") == ("shard", "driver")
    assert orchestration._node("wf(0).root-driver(0)") == ("root", "dag driver")


def test_only_the_lines_the_breakdown_reads_are_kept():
    lines = [
        "2026-01-01T00:00:00.1Z capturing logs",
        "2026-01-01T00:00:00.2Z I0101 launcher_v2.go:67] Setting log level to: '1'",
        "2026-01-01T00:00:00.3Z [KFP Executor 2026-01-01 00:00:00,300 INFO]: Looking for",
        "2026-01-01T00:00:00.4Z [KFP Executor 2026-01-01 00:00:00,400 INFO]: more",
        "2026-01-01T00:00:00.5Z I0101 launcher_v2.go:1230] ExecutorOutput: {",
        "2026-01-01T00:00:00.6Z I0101 launcher_v2.go:206] publish success.",
        "2026-01-01T00:00:00.7Z sub-process exited",
    ]
    assert orchestration._kept(lines) == [lines[i] for i in (0, 2, 4, 5, 6)]
    assert orchestration._kept([]) == []


def test_the_report_shows_the_ratio_and_where_the_cluster_run_s_time_goes(record):
    b = orchestration.breakdown(record)
    part = {
        "pipeline": "data", "rows": 344, "runs": 3, "backend": "2.17.0",
        "local": {"median_s": b["total_s"] / 4, "runs_s": [], "steps_s": {"shard": 5.0}},
        "cluster": {"median_s": b["total_s"], "runs_s": [], "submit_s": 3.0,
                    "run_id": record["run_id"], "breakdown": b, "phases_s": [b["phases"]]},
    }  # fmt: skip
    results = {"date": "2026-11-27T00:00:00+00:00", "machine": "x86_64, 2 cores", "runs": 3,
               "batch_size": 256, "orchestration": part}  # fmt: skip
    results["ratios"] = run.ratios(results)
    assert results["ratios"] == {orchestration.RATIO: pytest.approx(4.0)}
    text = run.markdown(results)
    assert f"| {orchestration.RATIO} | 4.00 |  |  |" in text
    assert "| cluster (run created -> SUCCEEDED) |" in text and "| 4.00 |" in text
    for name in b["phases"]:
        assert f"| {orchestration.PHASES[name]} | {b['phases'][name]:.1f} |" in text
    assert f"| **total** | **{b['total_s']:.1f}** | 100% |" in text
    assert "| Shard to TFRecords (Beam) (`shard`) |" in text and "| 5.0 s |" in text
    assert "already present on the node" in text and "no pull from a registry" in text
    plain = {k: v for k, v in results.items() if k != "orchestration"}
    plain["ratios"] = run.ratios(plain)
    assert "Orchestration" not in run.markdown(plain)  # runs without the part read as before


def test_without_a_cluster_the_part_says_how_to_bring_one_up(tmp_path, monkeypatch):
    from tfrecord_suite.errors import UserError

    monkeypatch.setenv("TFRS_CLUSTER_DIR", str(tmp_path))  # no cluster's state there
    with pytest.raises(UserError, match=r"make cluster-up"):
        orchestration._cluster()
