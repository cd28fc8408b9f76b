"""Multi-node training through Kubeflow Trainer v2: a ``trainer.kubeflow.org/v1alpha1`` TrainJob.

Trainer v2 replaced the per-framework jobs (TFJob and friends) with one ``TrainJob`` that names a
runtime; the runtime's JobSet runs the nodes. Kubeflow ships no TensorFlow runtime (its
TensorFlow support is deprecated: kubeflow/trainer#2699), so ``k8s/trainer-runtime/`` ships ours,
``tfrecord-suite-tensorflow``: one replicated job ``node`` whose pods reach each other through
JobSet's headless service, with the JobSet labels and the completion index passed in through the
downward API. The trainer builds ``TF_CONFIG`` from them
(:func:`tfrecord_suite.train.strategy.tf_config_from_node_env`), so MultiWorkerMirroredStrategy
runs without the old operator: node 0 is the chief.

The TrainJob carries what varies per run: image, arguments, node count, accelerators, and, in
``runtimePatches`` (Trainer v2.2 and later), the node selector, tolerations, service account,
``/dev/shm`` and the Secrets of :mod:`~tfrecord_suite.launch.credentials`. The runtime's pods
mount no service-account token (nodes never call the Kubernetes API; a runtime patch has no
field for it, so ``k8s/trainer-runtime`` sets it). The lifecycle (create, adopt, watch, logs,
cancel) is :mod:`tfrecord_suite.launch.job`'s.
"""

from __future__ import annotations

from typing import Any

from tfrecord_suite.launch.job import JobConfig, JobKind, last_true_condition
from tfrecord_suite.train.strategy import NUM_NODES_ENV

#: The ClusterTrainingRuntime in k8s/trainer-runtime/.
RUNTIME_NAME = "tfrecord-suite-tensorflow"
#: Trainer v2 applies the TrainJob's trainer fields to this replicated job and container.
NODE = "node"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
PATCH_MANAGER = "tfrecord-suite.dev/launcher"


def render_trainjob(config: JobConfig, runtime: str = RUNTIME_NAME) -> dict[str, Any]:
    """The ``TrainJob``: ``workers`` nodes of the TensorFlow runtime, each placed the same way."""
    placement = config.placement
    trainer: dict[str, Any] = {
        "image": config.image,
        "command": ["tfrecord-suite", "train"],
        "args": list(config.trainer_args),
        # the node count is the one thing a pod cannot read from its own labels
        "env": [{"name": NUM_NODES_ENV, "value": str(config.workers)}],
        "numNodes": config.workers,
        "resourcesPerNode": placement.resources(),
    }
    pod_spec: dict[str, Any] = {
        **config.pod_identity(),
        "volumes": [
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": placement.shm_size}}
        ],
        "containers": [{"name": NODE, "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}]}],
    }
    if placement.node_selector():
        pod_spec["nodeSelector"] = placement.node_selector()
    if placement.tolerations():
        pod_spec["tolerations"] = placement.tolerations()
    # the Secrets: volumes and pull secrets in the patch, the environment on the trainer (both
    # are merged into the runtime's "node" container by Trainer)
    config.credentials.apply(pod_spec, pod_spec["containers"])
    trainer["env"] += pod_spec["containers"][0].pop("env", [])
    node_patch = {
        "name": NODE,
        "template": {
            "metadata": {"labels": config.labels()},
            "spec": {"template": {"metadata": config.node_pod_metadata(), "spec": pod_spec}},
        },
    }
    return {
        "apiVersion": f"{TrainJob.group}/{TrainJob.version}",
        "kind": "TrainJob",
        "metadata": config.metadata(),
        "spec": {
            "runtimeRef": {
                "apiGroup": TrainJob.group,
                "kind": "ClusterTrainingRuntime",
                "name": runtime,
            },
            "activeDeadlineSeconds": int(config.timeout_seconds),
            "trainer": trainer,
            "runtimePatches": [
                {
                    "manager": PATCH_MANAGER,
                    "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [node_patch]}}},
                }
            ],
        },
    }


class TrainJobKind(JobKind):
    """Kubeflow Trainer v2's TrainJob on the ``tfrecord-suite-tensorflow`` runtime."""

    kind = "TrainJob"
    group, version, plural = "trainer.kubeflow.org", "v1alpha1", "trainjobs"
    container = NODE

    def render(self, config: JobConfig) -> dict[str, Any]:
        """See :func:`render_trainjob`."""
        return render_trainjob(config)

    def pod_selector(self, name: str) -> str:
        """JobSet labels every pod with its JobSet's name, which is the TrainJob's."""
        return f"{JOBSET_NAME_LABEL}={name}"

    def node_name(self, labels: dict[str, str]) -> str:
        """``node-0``, ``node-1``: the node's completion index, its rank."""
        # Kubernetes 1.28+ labels an indexed job's pods with their index too
        return f"{NODE}-{labels.get(COMPLETION_INDEX, '?')}"

    def state(self, job: dict[str, Any]) -> tuple[str, str]:
        """``Complete`` -> Succeeded, ``Failed`` -> Failed; Running while any job is active."""
        last = last_true_condition(job)
        if last is not None and last[0] in ("Complete", "Failed"):
            return ("Succeeded" if last[0] == "Complete" else "Failed"), last[1]
        jobs = (job.get("status") or {}).get("jobsStatus") or []
        if any(j.get("active") or j.get("ready") for j in jobs):
            return "Running", ""
        return "Pending", last[1] if last else ""

    def progress(self, job: dict[str, Any]) -> str:
        """``node: active=2 ready=2``."""
        jobs = (job.get("status") or {}).get("jobsStatus") or []
        return ", ".join(
            f"{j.get('name', '?')}: "
            + " ".join(
                f"{k}={j[k]}"
                for k in ("active", "ready", "succeeded", "failed", "suspended")
                if j.get(k)
            )
            for j in jobs
        )

    def describe(self, config: JobConfig) -> str:
        """``2 nodes of runtime tfrecord-suite-tensorflow``."""
        return f"{config.workers} nodes of runtime {RUNTIME_NAME}"

    def creation_hint(self, status: int, body: str) -> str:
        """Name the likely cause: an older Trainer, or the runtime not installed."""
        if "runtimePatches" in body or "activeDeadlineSeconds" in body:
            return (
                "This cluster's Kubeflow Trainer predates v2.2 (no runtimePatches): upgrade it, "
                "or launch with --launcher tfjob on a cluster with the Training Operator v1."
            )
        if RUNTIME_NAME in body:
            return (
                f"Install the TensorFlow runtime: kubectl apply -k k8s/trainer-runtime "
                f"(ClusterTrainingRuntime {RUNTIME_NAME})."
            )
        return ""


TrainJob = TrainJobKind()
