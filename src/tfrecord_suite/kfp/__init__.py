"""The Kubeflow side: the only package that imports kfp.

:mod:`.components` wraps each step as a kfp component with no logic; :mod:`.tasks` holds the plain
step functions those wrappers call (kfp-free, so they run and test without it); :mod:`.pipeline`
wires the DAG, :mod:`.placement` applies hardware placement to its train task, :mod:`.compile`
writes the YAML, :mod:`.local_run` runs it with kfp.local, :mod:`.submit` and :mod:`.retrain` send
it to a cluster.
"""
