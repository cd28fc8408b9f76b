"""tfrecord-suite: raw data to sharded, versioned TFRecords and distributed training on Kubeflow."""

__version__ = "0.1.0"
