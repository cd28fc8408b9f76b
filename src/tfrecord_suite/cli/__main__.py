"""``python -m tfrecord_suite.cli``: the same command line as ``tfrecord-suite``."""

from tfrecord_suite.cli.main import main

main()
