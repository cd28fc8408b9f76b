"""shard logic (kfp-free)."""
