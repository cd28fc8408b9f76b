"""Bytes in and out, kfp-free.

One storage seam for folders, gs:// and s3:// (:mod:`.storage`, a backend module per store),
TFRecord framing (:mod:`.framing`), the one template every shard name comes from
(:mod:`.naming`) and the local folders a process holds while it lives (:mod:`.held_folders`).
"""
