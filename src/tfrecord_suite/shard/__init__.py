"""Sharding raw data into TFRecords with Apache Beam, kfp-free.

:mod:`.sources` reads and splits inputs, :mod:`.convert` turns rows into tf.train.Examples,
:mod:`.plan` sizes the shards, :mod:`.transforms` holds the Beam PTransforms, :mod:`.spill` the
disk-backed shuffle for local runners, and :mod:`.step` runs the whole step.
"""
