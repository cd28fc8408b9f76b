"""A one-node Kubernetes cluster on this machine, from the pinned real parts (node.py)."""
