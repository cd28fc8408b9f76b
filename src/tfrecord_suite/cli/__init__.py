"""The ``tfrecord-suite`` command line: one module per command group, assembled in :mod:`.main`."""
