"""Kubeflow pipeline definitions, compiled by ``tfrecord-suite compile`` and run by ``run``."""
