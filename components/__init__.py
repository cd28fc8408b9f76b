"""Kubeflow component wrappers: no logic, each calls one plain function of the package."""
