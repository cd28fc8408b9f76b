"""Model registry (numbered, checksummed versions, CAS aliases) and the promotion gate's rules."""

import json
import os
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from tfrecord_suite.cli.main import main
from tfrecord_suite.io import storage
from tfrecord_suite.registry.models import ModelRegistry, ModelRegistryError
from tfrecord_suite.steps import training as training_steps
from tfrecord_suite.train.evaluate import HOLD, PROMOTE, decide


def fake_training_output(root: str, seed: int = 0) -> str:
    """A training step's folder: a SavedModel's files, metrics, and by-products not to register."""
    for rel, body in {
        "export/saved_model.pb": f"graph {seed}",
        "export/variables/variables.index": f"index {seed}",
        "metrics.json": json.dumps({"seed": seed}),
        "checkpoints/epoch-001.weights.h5": "ckpt",
        "logs/train/events": "tb",
    }.items():
        storage.write_text(os.path.join(root, rel), body)
    return root


class Artifact(SimpleNamespace):
    def __init__(self, uri="", metadata=None):
        super().__init__(uri=uri, path=uri, metadata=dict(metadata or {}))


def test_register_copies_the_model_with_checksums_and_lineage(tmp_path):
    reg = ModelRegistry(str(tmp_path / "models"))
    out = fake_training_output(str(tmp_path / "train"))
    m = reg.register("digits", out, "export", lineage={"dataset": "r/digits@1.0.0"})
    assert m.version == 1 and reg.alias("digits", "latest") == 1
    paths = sorted(f["path"] for f in m.manifest["files"])
    assert paths == ["export/saved_model.pb", "export/variables/variables.index", "metrics.json"]
    assert os.path.isfile(os.path.join(m.export_dir, "saved_model.pb"))
    assert m.manifest["lineage"]["dataset"] == "r/digits@1.0.0"
    assert reg.verify("digits", 1).version == 1
    # the training folder can go away: the registered copy stands alone
    storage.delete_tree(out)
    reg.verify("digits", 1)
    storage.write_text(os.path.join(m.export_dir, "saved_model.pb"), "tampered")
    with pytest.raises(ModelRegistryError, match=r"export/saved_model.pb: checksum mismatch"):
        reg.verify("digits", 1)


def test_register_refuses_a_folder_without_a_saved_model(tmp_path):
    storage.write_text(str(tmp_path / "train" / "metrics.json"), "{}")
    with pytest.raises(ModelRegistryError, match=r"no SavedModel at export/saved_model\.pb"):
        ModelRegistry(str(tmp_path / "m")).register("x", str(tmp_path / "train"), "export", {})
    assert not (tmp_path / "m").exists() or not ModelRegistry(str(tmp_path / "m")).versions("x")


def test_concurrent_registrations_get_distinct_numbers(tmp_path):
    reg = ModelRegistry(str(tmp_path / "models"))
    outs = [fake_training_output(str(tmp_path / f"t{i}"), seed=i) for i in range(5)]
    with ThreadPoolExecutor(max_workers=5) as pool:
        got = [f.result() for f in [pool.submit(reg.register, "m", o, "export", {}) for o in outs]]
    assert sorted(m.version for m in got) == [1, 2, 3, 4, 5]
    assert reg.versions("m") == [1, 2, 3, 4, 5] and reg.alias("m", "latest") == 5
    for v in reg.versions("m"):
        reg.verify("m", v)


def test_gate_rules():
    assert decide(0.9, None, True, 0.0)[0] == PROMOTE
    assert decide(0.9, 0.9, True, 0.0)[0] == PROMOTE  # at least as good
    assert decide(0.89, 0.9, True, 0.0)[0] == HOLD
    assert decide(0.89, 0.9, True, 0.02)[0] == PROMOTE
    assert decide(1.5, 2.0, False, 0.0)[0] == PROMOTE  # mse: lower is better
    assert decide(2.5, 2.0, False, 0.0)[0] == HOLD


def test_promotion_refuses_a_stale_comparison(tmp_path):
    """A run compared against v1; another run promoted v2 meanwhile: this run must not overwrite."""
    root = str(tmp_path / "models")
    reg = ModelRegistry(root)
    for i in range(3):
        reg.register("m", fake_training_output(str(tmp_path / f"t{i}"), i), "export", {})
    reg.set_alias("m", "stable", 1, expected=None)
    registered = Artifact(metadata={"version": 3, "model": "m", "model_registry": root})
    stale = Artifact(metadata={"baseline_version": 1})
    reg.set_alias("m", "stable", 2, expected=1)  # the other run
    with pytest.raises(storage.PreconditionFailed, match="points to 2, expected 1"):
        training_steps.promote_step(
            registered=registered,
            decision=stale,
            model_registry="",
            model_name="",
            alias="stable",
        )
    assert reg.alias("m", "stable") == 2
    fresh = Artifact(metadata={"baseline_version": 2})
    assert training_steps.promote_step(
        registered=registered, decision=fresh, model_registry="", model_name="", alias="stable"
    )
    assert reg.alias("m", "stable") == 3
    history = json.loads(storage.read_text(reg.alias_uri("m", "stable")))["history"]
    assert [h["version"] for h in history] == [1, 2]


def test_models_cli(tmp_path):
    root = str(tmp_path / "models")
    reg = ModelRegistry(root)
    for i in range(2):
        reg.register(
            "m",
            fake_training_output(str(tmp_path / f"t{i}"), i),
            "export",
            {"dataset": "r/d@1.0.0", "evaluation": {"decision": "promote"}},
        )
    runner = CliRunner()
    base = ["--registry", root, "--model", "m"]
    r = runner.invoke(main, ["models", "promote", *base, "--version", "1", "--expect", "none"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(main, ["models", "promote", *base, "--version", "2", "--expect", "2"])
    assert r.exit_code == 1 and "points to 1, expected 2" in r.output
    r = runner.invoke(main, ["models", "list", *base, "--json"])
    listed = json.loads(r.output)
    assert [(x["version"], x["aliases"]) for x in listed] == [(1, ["stable"]), (2, ["latest"])]
    r = runner.invoke(main, ["models", "verify", *base, "--version", "latest"])
    assert r.exit_code == 0 and "OK m v2" in r.output
    r = runner.invoke(main, ["models", "show", *base, "--version", "9"])
    assert r.exit_code == 2 and "model m v9 does not exist" in r.output


def register_racing_then_alias(reg: ModelRegistry, tmp_path) -> ModelRegistry:
    """Three models registered at once get distinct numbers; ``stable`` is created once by CAS."""
    outs = [fake_training_output(str(tmp_path / f"t{i}"), i) for i in range(3)]
    with ThreadPoolExecutor(max_workers=3) as pool:
        got = [f.result() for f in [pool.submit(reg.register, "m", o, "export", {}) for o in outs]]
    assert sorted(m.version for m in got) == [1, 2, 3]
    reg.verify("m", 2)
    reg.set_alias("m", "stable", 1, expected=None)
    with pytest.raises(storage.PreconditionFailed):
        reg.set_alias("m", "stable", 2, expected=None)
    return reg


@pytest.mark.gcs
def test_register_and_promote_on_fake_gcs(tmp_path, strict_gcs_bucket):
    reg = register_racing_then_alias(ModelRegistry(f"{strict_gcs_bucket}/_models"), tmp_path)
    assert reg.resolve("m", "stable").version == 1
