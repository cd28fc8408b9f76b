"""Bytes in and out, kfp-free.

One storage seam for folders, gs:// and s3:// (:mod:`.storage`, a backend module per store),
TFRecord framing (:mod:`.framing`) and the one template every shard name comes from
(:mod:`.naming`).
"""
