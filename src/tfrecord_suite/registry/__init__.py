"""registry logic (kfp-free)."""
