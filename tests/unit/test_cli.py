"""The command line: help everywhere, one clear line for bad input, JSON summaries."""

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from tfrecord_suite.cli.main import main

COMMANDS = [
    [],
    ["run"],
    ["demo"],
    ["shard"],
    ["train"],
    ["compile"],
    ["submit"],
    ["version"],
    ["version", "publish"],
    ["version", "list"],
    ["version", "show"],
    ["version", "verify"],
    ["version", "diff"],
    ["version", "alias"],
    ["version", "gc"],
]


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: " ".join(c) or "root")
def test_help_everywhere(cmd):
    result = CliRunner().invoke(main, [*cmd, "--help"])
    assert result.exit_code == 0 and "Usage:" in result.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["run", "--input", "/definitely/missing", "--workdir", "w"], "does not exist"),
        (["shard", "--input", "/definitely/missing", "--output", "o"], "does not exist"),
        (["shard", "--input", "{tmp}", "--output", "o"], "matches no files"),
        (["run", "--input", "{tmp}/x.weird", "--workdir", "w"], "cannot detect the format"),
        (
            ["run", "--input", "{tmp}/x.weird", "--format", "xml", "--workdir", "w"],
            "--format 'xml'",
        ),
        (["version", "show", "{tmp}/reg/..@latest"], "invalid"),
        (["version", "show", "{tmp}/reg/nothing@latest"], "no published versions"),
        (
            ["train", "--dataset", "{tmp}/reg/none@1.0.0", "--model-dir", "m", "--epochs", "0"],
            "--epochs",
        ),
    ],
)
def test_bad_input_gives_one_clear_line(tmp_path, args, message):
    (tmp_path / "x.weird").write_text("?")
    empty = tmp_path / "empty"
    empty.mkdir()
    args = [a.replace("{tmp}", str(empty) if a == "{tmp}" else str(tmp_path)) for a in args]
    proc = subprocess.run(
        [sys.executable, "-m", "tfrecord_suite.cli", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_input_that_is_not_there_fails_before_beam_or_tensorflow_is_imported(tmp_path):
    """A mistyped path costs the user a second, not the seconds Beam's import takes."""
    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from tfrecord_suite.cli.main import main\n"
        "for cmd in ('shard', 'run'):\n"
        "    out = '--output' if cmd == 'shard' else '--workdir'\n"
        "    result = CliRunner().invoke(main, [cmd, '--input', '/definitely/missing', out, 'o'])\n"
        "    assert result.exit_code == 2 and 'does not exist' in result.output, result.output\n"
        "heavy = [m for m in ('tensorflow', 'apache_beam', 'keras') if m in sys.modules]\n"
        "print(heavy); sys.exit(bool(heavy))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_shard_publish_list_verify_diff_alias_as_json(tmp_path, jsonl_file):
    runner = CliRunner()

    def call(*args):
        result = runner.invoke(main, list(args))
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    staged = str(tmp_path / "staged")
    reg = str(tmp_path / "reg")
    s = call("shard", "--input", jsonl_file, "--output", staged, "--num-shards", "2", "--json")
    assert s["records"] == 200 and len(s["shards"]) == 6
    p = call(
        "version", "publish", "--staged", staged, "--registry", reg, "--dataset", "rows", "--json"
    )
    assert (p["version"], p["created"]) == ("1.0.0", True)
    staged2 = str(tmp_path / "staged2")
    call("shard", "--input", jsonl_file, "--output", staged2, "--num-shards", "3", "--json")
    assert (
        call(
            "version",
            "publish",
            "--staged",
            staged2,
            "--registry",
            reg,
            "--dataset",
            "rows",
            "--json",
        )["version"]
        == "1.0.1"
    )
    assert call("version", "list", "--registry", reg, "--json") == {
        "rows": {"versions": ["1.0.0", "1.0.1"], "aliases": {"latest": "1.0.1", "stable": "1.0.0"}}
    }
    assert call("version", "verify", f"{reg}/rows@1", "--json")["ok"]
    d = call("version", "diff", f"{reg}/rows@1.0.0", f"{reg}/rows@1.0.1", "--json")
    assert d["bump_needed"] == "patch"
    # the first version is stable; the promote of a later one is explicit, compare-and-swap
    result = runner.invoke(
        main, ["version", "alias", f"{reg}/rows@1.0.1", "--name", "stable", "--expect", "none"]
    )
    assert result.exit_code == 1 and "points to 1.0.0" in result.output
    call("version", "alias", f"{reg}/rows@1.0.1", "--name", "stable", "--expect", "1.0.0", "--json")
    assert call("version", "show", f"{reg}/rows@stable", "--json")["version"] == "1.0.1"
    shard = next(f for f in (tmp_path / "reg" / "rows" / "1.0.0").rglob("train-*.tfrecord"))
    shard.write_bytes(shard.read_bytes()[:-5])
    result = runner.invoke(main, ["version", "verify", f"{reg}/rows@1.0.0"])
    assert result.exit_code == 1 and shard.name in result.output


def test_submit_param_parsing():
    from tfrecord_suite.kfp.submit import parse_params

    assert parse_params(["epochs=3", "gzip=true", 'beam_args=["--a"]', "input_uri=gs://b/x"]) == {
        "epochs": 3,
        "gzip": True,
        "beam_args": ["--a"],
        "input_uri": "gs://b/x",
    }
    with pytest.raises(ValueError, match="not a pipeline parameter"):
        parse_params(["nope=1"])
    with pytest.raises(ValueError, match="expected a Integer"):
        parse_params(["epochs=many"])


def test_shard_unknown_flag_is_an_error_and_beam_options_follow_the_separator(tmp_path):
    from click.testing import CliRunner

    from tfrecord_suite.cli.main import main

    r = CliRunner().invoke(
        main, ["shard", "--input", "x.csv", "--output", str(tmp_path), "--lable", "species"]
    )
    assert r.exit_code == 2
    assert "No such option '--lable'" in r.output and "--label" in r.output
    r = CliRunner().invoke(
        main,
        ["shard", "--input", str(tmp_path / "raw.csv"), "--output", str(tmp_path / "out"),
         "--", "--runner", "DataflowRunner", "--project", "p"],
    )  # fmt: skip
    assert r.exit_code == 2
    assert r.output.strip() == (
        f"error: --input {tmp_path / 'raw.csv'} is a local path but --runner DataflowRunner runs "
        "on remote workers that cannot see this machine's disk: use a gs:// or s3:// path"
    )


def test_user_errors_are_one_line_and_bugs_keep_their_traceback(tmp_path, monkeypatch):
    """UserError (and its subclasses: bad data, bad flags) is one ``error:`` line; any other
    exception is a bug and is not disguised as one, even a plain ValueError; --debug shows the
    traceback of both."""
    import tfrecord_suite.kfp.compile as compile_module

    def bug(*args, **kwargs):
        raise ValueError("internal invariant broken")

    r = CliRunner().invoke(
        main, ["compile", "--output", str(tmp_path / "p.yaml"), "--launcher", "x"]
    )
    assert r.exit_code == 2 and r.output.strip().startswith("error: --launcher 'x'")
    r = CliRunner().invoke(
        main, ["--debug", "compile", "--output", str(tmp_path / "p.yaml"), "--launcher", "x"]
    )
    assert r.exit_code != 0 and isinstance(r.exception, ValueError)  # raised, not summarized
    monkeypatch.setattr(compile_module, "compile_pipeline", bug)
    r = CliRunner().invoke(main, ["compile", "--output", str(tmp_path / "p.yaml")])
    assert r.exit_code == 1 and "error:" not in r.output
    assert str(r.exception) == "internal invariant broken"  # the traceback stays


def test_train_flags_stay_flat_over_the_nested_reader_config():
    """TrainConfig nests ReaderConfig; the train command's flags are the same flat ones, and
    build() puts them into the nested config (the round trip through flags.to_args is in test_tfjob)."""
    from click.testing import CliRunner

    from tfrecord_suite.cli import options
    from tfrecord_suite.cli.main import main
    from tfrecord_suite.train.reader_config import ReaderConfig
    from tfrecord_suite.train.trainer import TrainConfig

    text = CliRunner().invoke(main, ["train", "--help"], terminal_width=200).output
    for flag in ("--cycle-length", "--shuffle-buffer-bytes", "--cache", "--retune", "--seed"):
        assert flag in text
    assert "--skip-bad-records" in text and "--image-size" in text
    for inner in ("--shuffle-files", "--file-buffer-bytes", "--drop-remainder", "--repeat"):
        assert inner not in text  # set per input pipeline, not by the user
    cfg = options.build(
        TrainConfig,
        {"dataset": "r/d@1", "model_dir": "m", "cycle_length": 4, "cache": "memory", "seed": 7},
    )
    assert cfg.reader == ReaderConfig(cycle_length=4, cache="memory")
    assert cfg.reader_config(32, training=False).seed == 7
    assert cfg.reader_config(32, training=False).cache == ""


def test_the_cli_ends_on_sigterm_as_a_containers_first_process(tmp_path):
    """A container's first process gets no default action for SIGTERM: without a handler of its
    own it would run on through its pod's deletion until killed at the grace period's end. In a
    PID namespace of its own (as in a pod), the CLI's process ends at once with status 143; the
    same process without the handler is still running."""
    import shutil
    import signal
    import time

    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare(1) for a PID namespace")
    code = (
        "import sys, time\n"
        "from tfrecord_suite.cli.main import exit_on_sigterm\n"
        "if sys.argv[1] == 'handled': exit_on_sigterm()\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    ended = {}
    for mode in ("handled", "default"):
        # --fork: the python process is PID 1 of the new namespace; unshare waits for it
        proc = subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child", sys.executable,
                                 "-c", code, mode], stdout=subprocess.PIPE, text=True)  # fmt: skip
        assert proc.stdout.readline().strip() == "ready"
        child = int(subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                                   text=True).stdout.split()[0])  # fmt: skip
        os.kill(child, signal.SIGTERM)
        try:
            ended[mode] = proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            ended[mode] = None
            proc.kill()
            proc.wait()
        time.sleep(0.1)
    assert ended == {"handled": 143, "default": None}, ended
