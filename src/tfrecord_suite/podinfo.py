"""What a step's pod knows about itself on Kubernetes, handed in through the downward API.

The compiled pipelines give each step that needs them these environment variables
(:func:`tfrecord_suite.kfp.step_policies.configure` sets them with kfp-kubernetes'
``use_field_path_as_env``), so none of them is a component input:

* the pipeline run's ID, from the pod label ``pipeline/runid`` that the KFP API server puts on
  every pod of a run (``backend/src/apiserver/template/v2_template.go``). As an input it would
  enter Kubeflow's cache key (``backend/src/v2/cacheutils/cache.go`` keys on the resolved
  inputs) and no two runs would ever share a cached step; and the placeholder
  ``{{$.pipeline_job_uuid}}`` is resolved only from KFP backend 2.5;
* the pod's own name and UID, so the step's lease (:mod:`tfrecord_suite.launch.lease`), owner
  of what the step creates, names the pod as its owner (Kubernetes' garbage collector deletes
  it, and all it owns, with the pod);
* the pod's service account, so the job's nodes run as the account the run runs as.

Outside Kubernetes (``kfp.local``, the CLI) none is set, and callers fall back to what they
have (an artifact's URI identifies a step of a run just as well).
"""

from __future__ import annotations

import dataclasses
import os

#: The label the KFP API server puts on every pod of a run, with the run's id as its value.
RUN_ID_LABEL = "pipeline/runid"
#: ``env var -> downward API field path``; the one table the pipeline compiles from.
FIELDS = {
    "TFRS_RUN_ID": f"metadata.labels['{RUN_ID_LABEL}']",
    "TFRS_POD_NAME": "metadata.name",
    "TFRS_POD_UID": "metadata.uid",
    "TFRS_SERVICE_ACCOUNT": "spec.serviceAccountName",
}
RUN_ID_ENV, POD_NAME_ENV, POD_UID_ENV, SERVICE_ACCOUNT_ENV = FIELDS


@dataclasses.dataclass(frozen=True)
class PodInfo:
    """The step's pod as the downward API describes it (empty strings where not given).

    Attributes:
        run_id: The pipeline run's ID (the pod label ``pipeline/runid``).
        pod_name: The pod's name.
        pod_uid: The pod's UID.
        service_account: The pod's Kubernetes service account.

    """

    run_id: str = ""
    pod_name: str = ""
    pod_uid: str = ""
    service_account: str = ""

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> PodInfo:
        """Read the variables of :data:`FIELDS` (``os.environ`` by default)."""
        env = os.environ if environ is None else environ
        return cls(*(env.get(name, "").strip() for name in FIELDS))

    def owner_reference(self) -> dict[str, str] | None:
        """An ``ownerReference`` naming this pod, or None when its name or UID is unknown.

        ``blockOwnerDeletion`` is left unset: setting it needs ``update`` on the owner's
        ``finalizers`` (the ``OwnerReferencesPermissionEnforcement`` admission plugin), which
        the run's account need not have; the garbage collector deletes the dependent anyway.
        """
        if not (self.pod_name and self.pod_uid):
            return None
        return {"apiVersion": "v1", "kind": "Pod", "name": self.pod_name, "uid": self.pod_uid}
