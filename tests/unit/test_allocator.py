"""Which malloc the process runs with (tf.data on large records wants tcmalloc), read from the
process's memory map."""

import os
import subprocess
import sys

from tfrecord_suite.train import allocator

MAPS = """\
7f00-7f01 r-xp 00000000 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6
7f02-7f03 r-xp 00000000 08:01 2 /opt/venv/lib/python3.11/site-packages/tensorflow/libtensorflow_framework.so.2
"""


def test_reads_the_allocator_from_the_memory_map(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text(MAPS)
    assert allocator.loaded_allocator(str(maps)) == "glibc"
    maps.write_text(MAPS + "7f04-7f05 r-xp 0 08:01 3 /usr/local/lib/libtcmalloc_minimal.so.4\n")
    assert allocator.loaded_allocator(str(maps)) == "tcmalloc"
    maps.write_text(MAPS + "7f04-7f05 r-xp 0 08:01 3 /usr/lib/libjemalloc.so.2\n")
    assert allocator.loaded_allocator(str(maps)) == "jemalloc"
    assert allocator.loaded_allocator(str(tmp_path / "absent")) == "unknown"


def test_this_process_and_a_preloaded_one(tmp_path):
    preloaded = "tcmalloc" in os.environ.get("LD_PRELOAD", "")
    assert allocator.loaded_allocator() == ("tcmalloc" if preloaded else "glibc")
    assert (allocator.allocator_advice() is None) == preloaded
    found = allocator.find_tcmalloc()
    if found:  # where the machine has tcmalloc, a process started with it reports it
        code = "from tfrecord_suite.train import allocator; print(allocator.loaded_allocator())"
        env = dict(os.environ, LD_PRELOAD=found)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        assert out.stdout.strip() == "tcmalloc", out.stderr


def test_finds_tcmalloc_in_the_folders_it_is_given(tmp_path):
    lib = tmp_path / "libtcmalloc_minimal.so.4"
    lib.write_bytes(b"")
    assert allocator.find_tcmalloc((str(tmp_path),)) == str(lib)
