"""train logic (kfp-free)."""
