"""Training, kfp-free.

:mod:`.reader` is the tf.data input pipeline, :mod:`.features` the preprocessing,
:mod:`.model_fns` the built-in and user model functions, :mod:`.strategy` the tf.distribute
strategy, :mod:`.trainer` the fit/evaluate/export run, :mod:`.evaluate` the gate and
:mod:`.report` the run's report.
"""
