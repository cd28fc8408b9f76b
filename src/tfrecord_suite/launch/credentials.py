"""Storage and registry credentials off GKE: which Secrets every pod of a run gets, and how.

On GKE the pods read ``gs://`` as their Kubernetes service account through Workload Identity,
and on EKS through IRSA or Pod Identity: no Secret at all. Elsewhere (on-premises, a cluster
reading another cloud's bucket, a private registry) :class:`Credentials` names the Kubernetes
Secrets, the Kubeflow way: every step of a compiled pipeline gets them through kfp-kubernetes
(``use_secret_as_volume``, ``use_secret_as_env``, ``set_image_pull_secrets``;
:func:`tfrecord_suite.kfp.task_placement.apply_credentials`), and the train step hands them on to
every pod it creates (TrainJob and TFJob nodes, its tf.data service) in the same shape
(:meth:`Credentials.env`, :meth:`Credentials.volumes`...). The step learns them from its own
environment (:data:`CREDENTIALS_ENV`, set when the pipeline is compiled), not from an input, so
they stay out of Kubeflow's cache key.

Kept free of kfp: the launchers use it.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from tfrecord_suite.errors import UserError

#: Where a ``gcs-key`` Secret is mounted (read-only) in every pod.
STORAGE_MOUNT = "/var/run/secrets/tfrecord-suite/storage"
#: The key of a ``gcs-key`` Secret holding the service account's JSON key file.
GCS_KEY_FILE = "key.json"
#: The keys an ``s3-keys`` Secret must hold, each set as the environment variable of its name.
S3_REQUIRED_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
#: Keys an ``s3-keys`` Secret may hold (an S3-compatible store's endpoint, its region).
S3_OPTIONAL_KEYS = ("AWS_ENDPOINT_URL", "AWS_REGION")
STORAGE_SECRET_TYPES = ("gcs-key", "s3-keys")
#: The train step's environment variable carrying its :class:`Credentials` (JSON).
CREDENTIALS_ENV = "TFRS_CREDENTIALS"
#: The volume a ``gcs-key`` Secret is mounted from in the pods the launchers create.
_VOLUME = "tfrs-storage-credentials"


@dataclasses.dataclass(frozen=True)
class Credentials:
    """Kubernetes Secrets every step, and every pod the train step creates, gets.

    Attributes:
        storage_secret: A Secret holding the credentials the pods read and write the storage
            with; empty (the default): none, the pods' own identity (GKE Workload Identity, EKS
            IRSA or Pod Identity).
        storage_secret_type: What that Secret holds. gcs-key: a Google service account's JSON
            key under the key key.json, mounted read-only, GOOGLE_APPLICATION_CREDENTIALS
            pointing at it. s3-keys: the keys AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY
            (and, if present, AWS_ENDPOINT_URL and AWS_REGION), each set as the environment
            variable of its name.
        image_pull_secrets: Secrets of type kubernetes.io/dockerconfigjson for a private
            registry, separated by commas; every step and every pod the train step creates
            names them.

    """

    storage_secret: str = ""
    storage_secret_type: str = "gcs-key"
    image_pull_secrets: str = ""

    def __post_init__(self) -> None:
        if self.storage_secret_type not in STORAGE_SECRET_TYPES:
            raise UserError(
                f"--storage-secret-type {self.storage_secret_type!r}: use one of "
                f"{', '.join(STORAGE_SECRET_TYPES)}"
            )
        for name in (self.storage_secret, *self.pull_secret_names()):
            if name and not _is_dns_subdomain(name):
                raise UserError(
                    f"Secret name {name!r} is not a valid Kubernetes name (lower-case letters, "
                    "digits, '-' and '.')"
                )

    def __bool__(self) -> bool:
        return bool(self.storage_secret or self.image_pull_secrets)

    def pull_secret_names(self) -> list[str]:
        """The image pull Secrets' names."""
        return [n.strip() for n in self.image_pull_secrets.split(",") if n.strip()]

    @property
    def key_file(self) -> str:
        """GOOGLE_APPLICATION_CREDENTIALS of a ``gcs-key`` Secret."""
        return f"{STORAGE_MOUNT}/{GCS_KEY_FILE}"

    def env(self) -> list[dict[str, Any]]:
        """The containers' environment variables (Kubernetes ``EnvVar`` objects)."""
        if not self.storage_secret:
            return []
        if self.storage_secret_type == "gcs-key":
            return [{"name": "GOOGLE_APPLICATION_CREDENTIALS", "value": self.key_file}]
        return [
            {
                "name": key,
                "valueFrom": {
                    "secretKeyRef": {
                        "name": self.storage_secret,
                        "key": key,
                        **({"optional": True} if key in S3_OPTIONAL_KEYS else {}),
                    }
                },
            }
            for key in (*S3_REQUIRED_KEYS, *S3_OPTIONAL_KEYS)
        ]

    def volumes(self) -> list[dict[str, Any]]:
        """The pods' volumes (a ``gcs-key`` Secret's)."""
        if not (self.storage_secret and self.storage_secret_type == "gcs-key"):
            return []
        return [{"name": _VOLUME, "secret": {"secretName": self.storage_secret}}]

    def volume_mounts(self) -> list[dict[str, Any]]:
        """The containers' mounts of :meth:`volumes`."""
        if not self.volumes():
            return []
        return [{"name": _VOLUME, "mountPath": STORAGE_MOUNT, "readOnly": True}]

    def image_pull_secret_refs(self) -> list[dict[str, str]]:
        """The pods' ``imagePullSecrets``."""
        return [{"name": name} for name in self.pull_secret_names()]

    def apply(self, pod_spec: dict[str, Any], containers: list[dict[str, Any]]) -> None:
        """Add the Secrets to a pod spec (a dict) and its ``containers`` in place."""
        if self.volumes():
            pod_spec["volumes"] = [*pod_spec.get("volumes", []), *self.volumes()]
        if self.image_pull_secret_refs():
            pod_spec["imagePullSecrets"] = [
                *pod_spec.get("imagePullSecrets", []),
                *self.image_pull_secret_refs(),
            ]
        for container in containers:
            if self.env():
                container["env"] = [*container.get("env", []), *self.env()]
            if self.volume_mounts():
                container["volumeMounts"] = [
                    *container.get("volumeMounts", []),
                    *self.volume_mounts(),
                ]

    def to_json(self) -> str:
        """JSON of the fields (what :data:`CREDENTIALS_ENV` holds)."""
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Credentials:
        """The step's credentials from :data:`CREDENTIALS_ENV` (none when it is unset)."""
        text = (os.environ if environ is None else environ).get(CREDENTIALS_ENV, "")
        return cls(**json.loads(text)) if text else cls()


def _is_dns_subdomain(name: str) -> bool:
    import re

    return len(name) <= 253 and bool(
        re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*", name)
    )
