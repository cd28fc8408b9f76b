"""Kubeflow pipeline definitions (compiled by `tfrecord-suite compile`, run by `tfrecord-suite run`)."""
