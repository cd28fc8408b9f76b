"""Versioned datasets and models, kfp-free.

:mod:`.refs` parses names, versions and references; :mod:`.datasets` publishes, resolves and
verifies dataset versions, whose manifests' content :mod:`.content` computes and whose bump
(major, minor or patch) :mod:`.bumps` decides; :mod:`.models` does the same for trained models;
:mod:`.card` and :mod:`.tfds_meta` describe a version for people and for TFDS.
"""
