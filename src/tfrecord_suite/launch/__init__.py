"""Multi-node training on Kubernetes: placement, and the TrainJob or TFJob the train step launches.

kfp-free: the train step's task function calls it, and the pipeline only bakes the placement in.
"""
