"""The first ``import tensorflow`` without its native noise: on a stand-in package that prints
what TensorFlow 2.21 prints (tests/integration/test_train.py checks the real one)."""

import os
import subprocess
import sys
import textwrap

import pytest

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "src")
NOISE = (
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
    "I0000 00:00:1795665484.688299    5245 port.cc:153] oneDNN custom operations are on. You may "
    "see slightly different numerical results due to floating-point round-off errors.\n"
)


@pytest.fixture
def stand_in(tmp_path):
    """A ``tensorflow`` package whose import writes the noise and one line of news to fd 2."""
    package = tmp_path / "tensorflow"
    package.mkdir()
    (package / "__init__.py").write_text(
        textwrap.dedent(f"""
        import os, sys
        os.write(2, {NOISE.encode()!r})
        print("python warning: kept", file=sys.stderr)
        os.write(2, b"E0000 native error: kept\\n")
        os.write(2, {NOISE.encode()!r})
        if os.environ.get("BREAK"):
            raise ImportError("broken build")
        VALUE = 42
    """)
    )
    return tmp_path


def _python(stand_in, code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(stand_in), SRC]), **env},
    )  # fmt: skip


def test_the_first_import_keeps_every_line_but_the_noise(stand_in):
    code = (
        "import sys; from tfrecord_suite import tf_import; tf_import.install(); "
        "import tensorflow, tensorflow as again; "
        "print(tensorflow.VALUE, type(tensorflow.__loader__).__name__, "
        "[type(f).__name__ for f in sys.meta_path if 'Quiet' in type(f).__name__])"
    )
    run = _python(stand_in, code)
    assert run.stderr == "python warning: kept\nE0000 native error: kept\n"
    # the module has its own loader, and the finder is gone after the one import it wraps
    assert run.stdout == "42 SourceFileLoader []\n"
    plain = _python(stand_in, "import tensorflow")
    assert plain.stderr.count("oneDNN custom operations are on") == 2  # what install drops


def test_a_failing_import_still_fails_and_says_everything_else(stand_in):
    code = (
        "from tfrecord_suite import tf_import; tf_import.install()\n"
        "try:\n    import tensorflow\nexcept ImportError as e:\n    print('raised', e)\n"
    )
    run = _python(stand_in, code, BREAK="1")
    assert run.stdout == "raised broken build\n"
    assert run.stderr == "python warning: kept\nE0000 native error: kept\n"


def test_install_is_a_no_op_once_tensorflow_is_imported(stand_in):
    code = (
        "import sys, tensorflow; from tfrecord_suite import tf_import; tf_import.install(); "
        "print(sum('Quiet' in type(f).__name__ for f in sys.meta_path))"
    )
    assert _python(stand_in, code).stdout == "0\n"


def test_a_process_without_stderr_imports_as_it_would_without_install(tmp_path):
    """Started with descriptor 2 closed (``sys.stderr`` is None), nothing is held back."""
    (tmp_path / "tensorflow").mkdir()
    (tmp_path / "tensorflow" / "__init__.py").write_text("VALUE = 42\n")
    code = (
        "import sys; assert sys.stderr is None; from tfrecord_suite import tf_import; "
        "tf_import.install(); import tensorflow; print(tensorflow.VALUE)"
    )
    run = subprocess.run(
        ["sh", "-c", 'exec "$0" -c "$1" 2>&-', sys.executable, code], stdout=subprocess.PIPE,
        text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), SRC])},
    )  # fmt: skip
    assert run.returncode == 0 and run.stdout == "42\n"
