"""Bytes in and out, kfp-free.

One storage seam for folders and gs:// (:mod:`.storage`), TFRecord framing (:mod:`.framing`) and
the one template every shard name comes from (:mod:`.naming`).
"""
