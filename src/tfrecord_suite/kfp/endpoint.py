"""Reaching a Kubeflow Pipelines API: host, namespace, credentials, and the backend's version.

One :class:`KfpEndpoint` serves ``submit`` and ``retrain`` from a laptop, from CI and from the
CronJob in a cluster:

* standalone KFP (no authentication): no token;
* multi-user Kubeflow, in the cluster: the pod's projected service-account token (audience
  ``pipelines.kubeflow.org``), which the API server checks with a TokenReview and authorizes
  with a SubjectAccessReview in the run's namespace;
* from outside (CI, a laptop behind IAP or Dex): a bearer token in a file, re-read on every
  request so a short-lived token can be refreshed beside the process.

The client is built so that it never writes ``~/.config/kfp/context.json`` (kfp does when it
has to find a multi-user namespace itself), which fails on a read-only root filesystem such
as the CronJob's.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import warnings
from typing import Any

from tfrecord_suite.errors import UserError

#: Where Kubeflow's ``PodDefault`` (and the multi-user overlay's CronJob) mounts the projected
#: token, and the variable that names another path: kfp's own conventions
#: (``kfp.client.KF_PIPELINES_SA_TOKEN_PATH`` / ``KF_PIPELINES_SA_TOKEN_ENV``).
SA_TOKEN_PATH = "/var/run/secrets/kubeflow/pipelines/token"
SA_TOKEN_ENV = "KF_PIPELINES_SA_TOKEN_PATH"
#: The namespace a pod runs in (its service account's).
POD_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
AUTH_MODES = ("auto", "none", "token-file", "service-account")
_LOG = logging.getLogger(__name__)


class BackendError(UserError):
    """The Kubeflow Pipelines backend cannot run this pipeline correctly, or cannot be reached."""


@dataclasses.dataclass(frozen=True)
class KfpEndpoint:
    """How to reach and authenticate to a Kubeflow Pipelines API.

    Attributes:
        host: The KFP API endpoint, e.g. http://ml-pipeline.kubeflow.svc.cluster.local:8888 in
            the cluster or https://kubeflow.example.com/pipeline from outside.
        namespace: The Kubeflow profile namespace runs go to (multi-user Kubeflow); empty for
            standalone KFP, or to use the namespace of the pod this runs in when the backend is
            multi-user.
        auth: auto (a token file if given, else the pod's projected service-account token if
            mounted, else none), none, token-file or service-account.
        token_file: File holding a bearer token, re-read on every request (e.g. an IAP or Dex
            token a CI step writes); with auth auto, giving it selects token-file.
        sa_token_path: Projected service-account token (audience pipelines.kubeflow.org); empty:
            $KF_PIPELINES_SA_TOKEN_PATH or /var/run/secrets/kubeflow/pipelines/token.
        ssl_ca_cert: CA bundle that signs the endpoint's certificate (https hosts); empty: the
            system's.

    """

    host: str
    namespace: str = ""
    auth: str = "auto"
    token_file: str = ""
    sa_token_path: str = ""
    ssl_ca_cert: str = ""

    def __post_init__(self) -> None:
        if self.auth not in AUTH_MODES:
            raise UserError(f"--auth {self.auth!r}: use one of {', '.join(AUTH_MODES)}")
        if not re.match(r"^https?://", self.host or ""):
            raise UserError(
                f"--host {self.host!r}: give the API's URL with its scheme, e.g. "
                "http://ml-pipeline.kubeflow.svc.cluster.local:8888"
            )
        if self.auth == "token-file" and not self.token_file:
            raise UserError("--auth token-file needs --token-file")

    def token_path(self) -> str | None:
        """The file the bearer token is read from, or None to send no token.

        Raises:
            UserError: The chosen file does not exist.

        """
        sa_token = self.sa_token_path or os.environ.get(SA_TOKEN_ENV) or SA_TOKEN_PATH
        if self.auth == "none":
            return None
        if self.auth == "token-file" or (self.auth == "auto" and self.token_file):
            path = self.token_file
        elif self.auth == "service-account":
            path = sa_token
        else:  # auto, no token file: the in-cluster token where one is mounted
            return sa_token if os.path.isfile(sa_token) else None
        if not os.path.isfile(path):
            raise UserError(
                f"no token at {path}: "
                + (
                    "mount the projected service-account token there (audience "
                    "pipelines.kubeflow.org; k8s/overlays/multi-user does) or set --sa-token-path"
                    if path == sa_token
                    else "write the bearer token into that file first"
                )
            )
        return path

    def headers(self) -> dict[str, str]:
        """The ``Authorization`` header kfp's client sends, read from the token file now."""
        path = self.token_path()
        if not path:
            return {}
        with open(path) as fh:
            return {"Authorization": f"Bearer {fh.read().strip()}"}

    def client(self, namespace: str) -> Any:
        """A ``kfp.Client`` for this endpoint, its runs in ``namespace`` (empty: standalone)."""
        import kfp
        from kfp.client import ServiceAccountTokenVolumeCredentials

        path = self.token_path()
        credentials = ServiceAccountTokenVolumeCredentials(path) if path else None
        with warnings.catch_warnings():
            # "This client only works with Kubeflow Pipeline v2.0.0-beta.2 and later"
            warnings.simplefilter("ignore", FutureWarning)
            return kfp.Client(
                host=self.host,
                # kfp's default ("kubeflow") makes the client ask the server whether it is
                # multi-user and then save the pod's namespace to ~/.config/kfp/context.json; a
                # namespace given is used as is, and a standalone backend is never asked
                namespace=namespace or "kubeflow",
                credentials=credentials,
                ssl_ca_cert=self.ssl_ca_cert or None,
            )


@dataclasses.dataclass(frozen=True)
class Backend:
    """What the API server says of itself (``GET /apis/v2beta1/healthz``).

    Attributes:
        version: The release it was built from (``tag_name``), e.g. ``2.5.0``; empty when the
            server does not say.
        multi_user: Whether runs are namespaced and authorized per profile.

    """

    version: str
    multi_user: bool

    def version_tuple(self) -> tuple[int, ...] | None:
        """``2.5.0`` -> ``(2, 5, 0)``; None for an empty or unparseable version."""
        m = re.match(r"^v?(\d+)\.(\d+)(?:\.(\d+))?", self.version)
        return tuple(int(x or 0) for x in m.groups()) if m else None


#: The oldest KFP backend that runs the compiled pipeline as written. Its driver must apply the
#: Kubernetes platform settings the pipeline uses: ``fieldPathAsEnv`` (the run id and the pod's
#: identity, :mod:`tfrecord_suite.podinfo`) from 2.1.0, ``emptyDirMounts`` (the trainer's
#: in-memory ``/dev/shm``) from 2.3.0 (``backend/src/v2/driver/driver.go`` of each release).
#: The pod label ``pipeline/runid`` those read is set by every 2.x API server
#: (``backend/src/apiserver/template/v2_template.go``).
MIN_BACKEND = (2, 3, 0)
#: What the API server reports when its image was built without its release tag: KFP's own
#: images built on GitHub before 2.16.0 (2.5.0 to 2.15.x); releases before 2.5.0 were built
#: with the tag (``backend/Dockerfile`` ``ARG TAG_NAME=unknown``).
UNKNOWN_VERSION = "unknown"


def check_backend(info: Backend) -> None:
    """Refuse a backend older than :data:`MIN_BACKEND`.

    A backend that reports no version (:data:`UNKNOWN_VERSION`) is let through with a warning:
    KFP's own images of 2.5.0 to 2.15.x report none, and older releases always did.

    Raises:
        BackendError: Naming the version found and what an older one would do wrong.

    """
    found = info.version_tuple()
    need = ".".join(map(str, MIN_BACKEND))
    if found is None:
        _LOG.warning(
            "the Kubeflow Pipelines backend reports no version (tag_name %r): KFP's own images "
            "of 2.5.0-2.15.x do that; this pipeline needs %s or later",
            info.version,
            need,
        )
        return
    if found < MIN_BACKEND:
        raise BackendError(
            f"Kubeflow Pipelines backend {info.version} is older than {need}, which this "
            "pipeline needs: before 2.3.0 the driver does not mount the trainer's in-memory "
            "/dev/shm (emptyDirMounts), before 2.1.0 it does not pass the run id to the steps "
            "(fieldPathAsEnv); upgrade KFP (Kubeflow 1.9.1 ships 2.3.0, 1.10 ships 2.5.0)"
        )


@dataclasses.dataclass(frozen=True)
class Session:
    """A client connected to a backend this pipeline can run on.

    Attributes:
        client: The ``kfp.Client``.
        backend: What the server said of itself.
        namespace: The namespace runs go to (empty on a standalone backend).

    """

    client: Any
    backend: Backend
    namespace: str


def probe(endpoint: KfpEndpoint) -> Backend:
    """``GET /apis/v2beta1/healthz`` with the endpoint's credentials.

    Raises:
        BackendError: The server did not answer, refused the credentials, or is not KFP.

    """
    import ssl
    import urllib.error
    import urllib.request

    url = endpoint.host.rstrip("/") + "/apis/v2beta1/healthz"
    request = urllib.request.Request(url, headers=endpoint.headers())
    context = ssl.create_default_context(cafile=endpoint.ssl_ca_cert or None)
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as response:
            body = json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        hint = " (check --auth and the token)" if exc.code in (401, 403) else ""
        raise BackendError(f"{url} answered {exc.code} {exc.reason}{hint}") from None
    except (OSError, ValueError) as exc:
        raise BackendError(f"no Kubeflow Pipelines API at {url}: {exc}") from None
    return Backend(str(body.get("tag_name") or ""), bool(body.get("multi_user")))


def connect(endpoint: KfpEndpoint) -> Session:
    """Check the backend, settle the namespace, and build the client.

    On a multi-user backend runs need a namespace: ``endpoint.namespace``, or the namespace of
    the pod this runs in. On a standalone one a namespace is dropped with a warning, as the
    API server drops it (runs there have none).

    Raises:
        BackendError: The backend is unreachable or too old.
        UserError: No namespace for a multi-user backend.

    """
    info = probe(endpoint)
    check_backend(info)
    namespace = endpoint.namespace
    if info.multi_user and not namespace:
        try:
            with open(POD_NAMESPACE_FILE) as fh:
                namespace = fh.read().strip()
        except OSError:
            namespace = ""
        if not namespace:
            raise UserError(
                f"{endpoint.host} is multi-user Kubeflow: give --namespace, your profile's "
                "namespace (in a pod, its own namespace is used)"
            )
    if namespace and not info.multi_user:
        # the API server drops it too (ReplaceNamespace in resource/resource_manager.go)
        _LOG.warning(
            "--namespace %s ignored: %s is standalone Kubeflow Pipelines, whose runs have no "
            "namespace",
            namespace,
            endpoint.host,
        )
        namespace = ""
    return Session(endpoint.client(namespace), info, namespace)
