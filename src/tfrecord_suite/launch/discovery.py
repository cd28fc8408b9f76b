"""Which job API to launch multi-node training with: ask the API server what it serves.

``auto`` prefers Kubeflow Trainer v2's TrainJob (current Kubeflow) and falls back to the Training
Operator v1's TFJob. Discovery needs no RBAC beyond what every authenticated account has
(``system:discovery``).
"""

from __future__ import annotations

import logging
from typing import Any

from tfrecord_suite.launch.job import JobKind, LauncherUnavailable
from tfrecord_suite.launch.kube import retrying
from tfrecord_suite.launch.tfjob import TFJob
from tfrecord_suite.launch.trainjob import RUNTIME_NAME, TrainJob

_LOG = logging.getLogger(__name__)

#: In the order ``auto`` tries them.
KINDS: dict[str, JobKind] = {"trainjob": TrainJob, "tfjob": TFJob}

_INSTALL = (
    "Install Kubeflow Trainer v2.2 or later and the TensorFlow runtime "
    f"(kubectl apply -k k8s/trainer-runtime, ClusterTrainingRuntime {RUNTIME_NAME}), "
    "or the Kubeflow Training Operator v1 (TFJob)."
)


def serves(api_client: Any, kind: JobKind) -> bool:
    """Whether the API server serves ``kind``'s resource (its group/version lists the plural)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        resources = retrying(client.CustomObjectsApi(api_client).get_api_resources)(
            kind.group, kind.version
        )
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return any(r.name == kind.plural for r in (resources.resources or []))


def choose_launcher(requested: str, api_client: Any) -> JobKind:
    """The job kind to launch with: ``requested`` if served, or the first served for ``auto``.

    Raises:
        LauncherUnavailable: The cluster serves neither (or not the one asked for); the
            message says what to install.

    """
    return choose_launchers(requested, api_client)[0]


def choose_launchers(requested: str, api_client: Any) -> list[JobKind]:
    """The job kinds to try, in order: ``requested`` if served; for ``auto`` every served one.

    ``auto`` tries TrainJob first and keeps TFJob as the fallback: a cluster may serve a
    TrainJob of a Trainer older than v2.2 (Kubeflow 1.11 installs Trainer v2.1 beside the
    Training Operator), which refuses our TrainJob; the caller then launches a TFJob.

    Raises:
        LauncherUnavailable: The cluster serves neither (or not the one asked for); the
            message says what to install.

    """
    if requested != "auto":
        if requested not in KINDS:
            raise LauncherUnavailable(f"--launcher {requested!r}: use auto, {', '.join(KINDS)}")
        kind = KINDS[requested]
        if not serves(api_client, kind):
            raise LauncherUnavailable(
                f"--launcher {requested}: this cluster does not serve {kind.plural}.{kind.group}"
                f"/{kind.version}. {_INSTALL} Or use --launcher auto."
            )
        return [kind]
    served = [kind for kind in KINDS.values() if serves(api_client, kind)]
    if served:
        _LOG.info("launcher auto: the cluster serves %s", ", ".join(k.plural for k in served))
        return served
    raise LauncherUnavailable(
        "no multi-node training API on this cluster: neither TrainJob "
        "(trainer.kubeflow.org/v1alpha1) nor TFJob (kubeflow.org/v1) is served. " + _INSTALL
    )
