"""A one-node Kubernetes cluster on this machine, from the pinned real parts (node.py brings it
up; bringup.py holds the running cluster and its steps)."""
