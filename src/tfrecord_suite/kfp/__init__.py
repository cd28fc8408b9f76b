"""The Kubeflow side: the only package that imports kfp.

:mod:`.components` wraps each step as a kfp component with no logic (the bodies they call are
kfp-free, in :mod:`tfrecord_suite.steps`); :mod:`.step_policies` is the one table of how each step
runs in a pipeline, :mod:`.task_placement` applies a placement, images and credentials to a kfp
task (the kfp-free :mod:`tfrecord_suite.launch.placement` is the placement itself),
:mod:`.catalog` describes the components, :mod:`.compile` writes the YAML, :mod:`.local_run` runs
it with kfp.local, :mod:`.endpoint` and :mod:`.submit` send it to a cluster through
``kfp.Client`` (the kfp-free decision whether to retrain is :mod:`tfrecord_suite.retrain`).
"""
