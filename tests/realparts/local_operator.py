"""A stand-in for the job operators and for their nodes' kubelet, working through the REAL API
server (controlplane.py): what runs a launcher's TrainJob or TFJob as local processes.

The control plane here has no Kubeflow Trainer, no JobSet controller, no Training Operator and
no kubelet. :class:`LocalOperator` plays them for one namespace, and only through the API:

* it polls the namespace's TrainJobs and TFJobs: the objects the launcher created, as the real
  server validated and stored them;
* for a TrainJob it reads the ClusterTrainingRuntime the job names from the server (the test
  applies ``k8s/trainer-runtime``) and merges the TrainJob's trainer fields into it as Trainer v2
  does (image, command and args replaced, env upserted, ``numNodes`` nodes). Each node gets the
  runtime container's environment, its downward-API fields resolved from the labels and the
  annotation JobSet and the Job controller give the pod, and no ``TF_CONFIG`` (the trainer
  builds it). For a TFJob each replica gets the ``TF_CONFIG`` the Training Operator gives it;
* it creates each node's pod through the API (owned by the job, labelled as JobSet or the
  operator label it, bound to a node of its own that the scheduler leaves alone), runs the node
  as a local process, and writes the pod's status as a kubelet would (Running, then the
  container's exit code) and the job's status as the operator would (conditions and counts,
  in the upstream controllers' words);
* it serves the pods' logs as a kubelet does: its Node names an endpoint on 127.0.0.1 (TLS,
  a certificate of the control plane's CA), so the launcher's ``pods/log`` requests go through
  the API server's own proxy to the processes' output;
* it finishes its pods' deletion as a kubelet does (the garbage collector's foreground deletion
  of a job, a namespace going): it stops the process and removes the pod.

What it cannot prove: that Trainer v2 with JobSet, or the Training Operator, make these pods from
these objects (the merge rules are restated, not run), the images, DNS between pods, restarts (a
JobSet's ``failurePolicy``, a TFJob's ``restartPolicy``: here the first node to fail fails the
job), or anything a real kubelet does. The nodes share 127.0.0.1, so each TrainJob node also gets
``TFRS_PEER_ADDRESSES`` (distinct ports) where a cluster gives each pod its own DNS name on one
port. The real Trainer, JobSet and kubelet run in the one-node cluster's tests (tests/cluster,
``make test-cluster``), not these.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import re
import secrets
import ssl
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from realparts.certificates import CertificateAuthority
from realparts.processes import free_ports
from realparts.standins import (
    JOBSET_FINISHED,
    STAND_IN,
    trainjob_status,
    utc_now,
    write_pod_status,
)

_LOG = logging.getLogger(__name__)

#: ``(group, version, plural, kind)`` of the job APIs it runs.
JOB_APIS = (
    ("trainer.kubeflow.org", "v1alpha1", "trainjobs", "TrainJob"),
    ("kubeflow.org", "v1", "tfjobs", "TFJob"),
)
#: The label value of the pods it runs (the stand-in kubelet of standins.py leaves them alone).
OWN = "local-operator"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
#: What stands for the images' ``tfrecord-suite`` entrypoint: this interpreter's CLI.
CLI = [sys.executable, "-m", "tfrecord_suite.cli"]


def python(code: str) -> list[str]:
    """The command of a node that runs ``code`` (a test's own node program)."""
    return [sys.executable, "-c", code]


def node_program(output: str = "", exit_code: int | None = 0) -> list[str]:
    """A node that prints ``output`` and exits with ``exit_code`` (None: runs until stopped)."""
    end = "time.sleep(3600)" if exit_code is None else f"sys.exit({exit_code})"
    return python(f"import sys, time; sys.stdout.write({output!r}); sys.stdout.flush(); {end}")


@dataclasses.dataclass
class LocalNode:
    """One node of a job: its pod, its process and its log."""

    job_uid: str
    name: str  # chief-0, worker-1, node-0: the launcher's name for it
    rtype: str  # Chief, Worker (a TFJob's replica type) or node
    index: int
    pod: str
    container: str
    log: Path
    process: subprocess.Popen | None = None
    exit_code: int | None = None
    reported: bool = False


@dataclasses.dataclass
class LocalJob:
    """One job the stand-in runs: the object as it read it, and its nodes."""

    kind: str
    plural: str
    group: str
    version: str
    name: str
    uid: str
    object: dict[str, Any]
    nodes: list[LocalNode]
    state: str = "Running"


class LocalOperator:
    """Runs the TrainJobs and TFJobs created in ``namespace`` as local processes (see the module).

    Use as a context manager. ``program(node)`` (``node``: ``chief-0``, ``worker-1``,
    ``node-0``) gives a node's command instead of its container's (None: the container's, run
    as :data:`CLI`); ``on_start(job)`` is called with each job object before its nodes start.
    ``jobs`` holds every job it ran, by UID; ``errors`` anything that went wrong in its thread
    (raised on leaving).
    """

    def __init__(
        self,
        plane: Any,
        namespace: str,
        log_dir: Path,
        *,
        program: Callable[[str], list[str] | None] | None = None,
        on_start: Callable[[dict[str, Any]], None] | None = None,
        env: dict[str, str] | None = None,
        interval: float = 0.2,
    ):
        from kubernetes import client

        self.plane = plane
        self.namespace = namespace
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.program = program
        self.on_start = on_start
        # a node's environment is a pod's: none of the step's pod variables, no TF_CONFIG
        base = dict(os.environ if env is None else env)
        self.env = {k: v for k, v in base.items() if not k.startswith(("TFRS_", "TF_CONFIG"))}
        self.interval = interval
        api = plane.api_client()
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.node = f"local-operator-{secrets.token_hex(3)}"
        self.jobs: dict[str, LocalJob] = {}
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=self.node, daemon=True)
        self._logs = self._log_server()

    # ------------------------------------------------------------------------------ lifecycle

    def __enter__(self) -> LocalOperator:
        threading.Thread(target=self._logs.serve_forever, daemon=True).start()
        self._register_node()
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        from kubernetes.client.exceptions import ApiException

        self._stop.set()
        self._thread.join(timeout=30)
        for job in self.jobs.values():
            for node in job.nodes:
                self._kill(node)
        # what is left of its pods (a job kept on failure) goes with it: nothing else would
        # ever finish their deletion
        for pod in self._own_pods():
            with contextlib.suppress(ApiException):
                self.core.delete_namespaced_pod(
                    pod.metadata.name, self.namespace, grace_period_seconds=0
                )
        with contextlib.suppress(ApiException):
            self.core.delete_node(self.node)
        self._logs.shutdown()
        self._logs.server_close()
        if self.errors and exc[0] is None:
            raise AssertionError("the local operator failed:\n" + "\n".join(self.errors))

    def node_of(self, pod: str) -> LocalNode:
        """The node whose pod is ``pod``."""
        for job in self.jobs.values():
            for node in job.nodes:
                if node.pod == pod:
                    return node
        raise KeyError(pod)

    def logs(self) -> dict[str, str]:
        """``pod -> its process's whole output`` of every node it ran."""
        return {
            n.pod: n.log.read_text(errors="replace") for j in self.jobs.values() for n in j.nodes
        }

    # ---------------------------------------------------------------------- the node object

    def _register_node(self) -> None:
        """A Node the scheduler leaves alone (a taint), reached for logs at the log server."""
        port = self._logs.server_address[1]
        self.plane.add_node(self.node, cpu="64", memory="256Gi")
        self.core.patch_node_status(
            self.node,
            {"status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                        "daemonEndpoints": {"kubeletEndpoint": {"Port": port}}}},
        )  # fmt: skip
        self.core.patch_node(
            self.node,
            {"spec": {"taints": [{"key": STAND_IN, "value": OWN, "effect": "NoSchedule"}]}},
        )

    def _log_server(self) -> ThreadingHTTPServer:
        """A kubelet's ``/containerLogs/<namespace>/<pod>/<container>`` over TLS."""
        operator = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                m = re.fullmatch(r"/containerLogs/([^/]+)/([^/]+)/([^/]+)", url.path)
                query = dict(urllib.parse.parse_qsl(url.query))
                try:
                    node = operator.node_of(m[2]) if m and m[1] == operator.namespace else None
                except KeyError:
                    node = None
                if node is None or node.container != m[3]:
                    self.send_error(404, "no such container")
                    return
                lines = node.log.read_text(errors="replace").splitlines(keepends=True)
                if "tailLines" in query:
                    lines = lines[-int(query["tailLines"]) :] if int(query["tailLines"]) else []
                body = "".join(lines).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        cert, key = self._serving_certificate()
        context.load_cert_chain(str(cert), str(key))
        server.socket = context.wrap_socket(server.socket, server_side=True)
        return server

    def _serving_certificate(self) -> tuple[Path, Path]:
        """A serving certificate for 127.0.0.1 from the control plane's CA, as a kubelet's."""
        ca = CertificateAuthority.read(self.plane.ca_file, self.plane.workdir / "ca.key")
        cert, key = ca.issue(self.node, hosts=("127.0.0.1",), server=True)
        cert_path, key_path = self.log_dir / f"{self.node}.crt", self.log_dir / f"{self.node}.key"
        cert_path.write_bytes(cert)
        key_path.write_bytes(key)
        return cert_path, key_path

    # --------------------------------------------------------------------------- the loop

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self._step()
            except Exception as exc:  # reported on leaving
                if not self._stop.is_set():
                    self.errors.append(f"{type(exc).__name__}: {exc}")
                    _LOG.exception("local operator")

    def _step(self) -> None:
        live: set[str] = set()
        for group, version, plural, kind in JOB_APIS:
            for job in self._list(group, version, plural):
                uid = job["metadata"]["uid"]
                live.add(uid)
                if uid not in self.jobs and not job["metadata"].get("deletionTimestamp"):
                    job.setdefault("kind", kind)
                    self._start(job, group, version, plural)
        for job in self.jobs.values():
            if job.uid not in live:  # gone: its pods go with it (the collector)
                for node in job.nodes:
                    self._kill(node)
                continue
            self._progress(job)
        self._finish_deletions()

    def _list(self, group: str, version: str, plural: str) -> list[dict[str, Any]]:
        from kubernetes.client.exceptions import ApiException

        try:
            return self.custom.list_namespaced_custom_object(
                group, version, self.namespace, plural
            )["items"]
        except ApiException as exc:
            if exc.status == 404:  # this cluster does not serve it
                return []
            raise

    def _own_pods(self) -> list[Any]:
        return self.core.list_namespaced_pod(
            self.namespace, label_selector=f"{STAND_IN}={OWN}"
        ).items

    def _finish_deletions(self) -> None:
        """A pod being deleted: stop its process and remove it, as its kubelet would."""
        from kubernetes.client.exceptions import ApiException

        for pod in self._own_pods():
            if not pod.metadata.deletion_timestamp:
                continue
            with contextlib.suppress(KeyError):
                self._kill(self.node_of(pod.metadata.name))
            with contextlib.suppress(ApiException):
                self.core.delete_namespaced_pod(
                    pod.metadata.name, self.namespace, grace_period_seconds=0
                )

    # ------------------------------------------------------------------------- a job starts

    def _start(self, job: dict[str, Any], group: str, version: str, plural: str) -> None:
        name, uid = job["metadata"]["name"], job["metadata"]["uid"]
        specs = self._trainjob_nodes(job) if job["kind"] == "TrainJob" else self._tfjob_nodes(job)
        # a job of the same name deleted in the background leaves its pods to the collector for
        # a moment: as an operator would, start once their names are free
        taken = {p.metadata.name for p in self._own_pods()}
        if any(spec["pod"] in taken for spec in specs):
            return
        if self.on_start is not None:
            self.on_start(job)
        local = LocalJob(job["kind"], plural, group, version, name, uid, job, [])
        self.jobs[uid] = local
        for spec in specs:
            node = LocalNode(
                uid, spec["node"], spec["rtype"], spec["index"], spec["pod"],
                spec["container"]["name"], self.log_dir / f"{spec['pod']}.log",
            )  # fmt: skip
            local.nodes.append(node)
            created = self.core.create_namespaced_pod(self.namespace, self._pod(job, spec))
            argv = (self.program(node.name) if self.program else None) or [
                *CLI,
                *spec["command"][1:],
                *spec["args"],
            ]
            with open(node.log, "wb") as out:
                node.process = subprocess.Popen(
                    argv, stdout=out, stderr=subprocess.STDOUT, env={**self.env, **spec["env"]}
                )
            write_pod_status(self.core, self.namespace, created)
        self._write_job_status(local, "Running")

    def _pod(self, job: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
        """The node's pod: owned by the job as the operator's are, bound to this stand-in."""
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": spec["pod"],
                "labels": {**spec["labels"], STAND_IN: OWN},
                "annotations": spec["annotations"],
                "ownerReferences": [_controller_of(job)],
            },
            "spec": {
                "nodeName": self.node,
                "restartPolicy": "Never",
                "automountServiceAccountToken": False,
                "containers": [
                    {
                        "name": spec["container"]["name"],
                        "image": spec["container"]["image"],
                        "command": spec["command"],
                        "args": spec["args"],
                    }
                ],
            },
        }

    def _trainjob_nodes(self, job: dict[str, Any]) -> list[dict[str, Any]]:
        """Trainer v2 and JobSet: the runtime's ``node`` container with the trainer's fields."""
        ref = job["spec"]["runtimeRef"]
        if ref.get("kind", "ClusterTrainingRuntime") != "ClusterTrainingRuntime":
            raise NotImplementedError(f"runtime kind {ref.get('kind')}")
        runtime = self.custom.get_cluster_custom_object(
            "trainer.kubeflow.org", "v1alpha1", "clustertrainingruntimes", ref["name"]
        )
        (rjob,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
        template = rjob["template"]["spec"]["template"]
        (container,) = [c for c in template["spec"]["containers"] if c["name"] == "node"]
        trainer = job["spec"].get("trainer") or {}
        count = trainer.get("numNodes") or runtime["spec"].get("mlPolicy", {}).get("numNodes", 1)
        name = job["metadata"]["name"]
        patched = _runtime_patch_labels(job, rjob["name"])
        ports = free_ports(count)
        out = []
        for i in range(count):
            labels = {
                **(template.get("metadata") or {}).get("labels", {}),
                **patched,
                "jobset.sigs.k8s.io/jobset-name": name,
                "jobset.sigs.k8s.io/replicatedjob-name": rjob["name"],
                "jobset.sigs.k8s.io/job-index": "0",
                COMPLETION_INDEX: str(i),
            }
            annotations = {**(template.get("metadata") or {}).get("annotations", {}),
                           COMPLETION_INDEX: str(i)}  # fmt: skip
            meta = {"name": "", "labels": labels, "annotations": annotations}
            env = {e["name"]: e for e in container.get("env", [])}
            env.update({e["name"]: e for e in trainer.get("env", [])})  # upserted by name
            values = {k: self._env_value(v, meta) for k, v in env.items()}
            values["TFRS_PEER_ADDRESSES"] = ",".join(f"127.0.0.1:{p}" for p in ports)
            pod = f"{name}-{rjob['name']}-0-{i}-{secrets.token_hex(3)[:5]}"
            meta["name"] = pod
            out.append({
                "node": f"node-{i}", "rtype": "node", "index": i, "pod": pod,
                "labels": labels, "annotations": annotations,
                "container": {"name": "node", "image": trainer.get("image") or container["image"]},
                "command": trainer.get("command") or container.get("command") or [],
                "args": trainer.get("args") or container.get("args") or [],
                "env": {k: v for k, v in values.items() if v is not None},
            })  # fmt: skip
        return out

    def _tfjob_nodes(self, job: dict[str, Any]) -> list[dict[str, Any]]:
        """The Training Operator: one pod per replica, ``TF_CONFIG`` naming them all."""
        name = job["metadata"]["name"]
        replicas = [
            (rtype, i, spec)
            for rtype, spec in job["spec"]["tfReplicaSpecs"].items()
            for i in range(spec.get("replicas", 1))
        ]
        cluster: dict[str, list[str]] = {}
        for (rtype, _, _), port in zip(replicas, free_ports(len(replicas)), strict=True):
            cluster.setdefault(rtype.lower(), []).append(f"127.0.0.1:{port}")
        out = []
        for rtype, i, spec in replicas:
            template = spec["template"]
            (container,) = [c for c in template["spec"]["containers"] if c["name"] == "tensorflow"]
            pod = f"{name}-{rtype.lower()}-{i}"
            labels = {
                **(template.get("metadata") or {}).get("labels", {}),
                "training.kubeflow.org/operator-name": "tfjob-controller",
                "training.kubeflow.org/job-name": name,
                "training.kubeflow.org/replica-type": rtype.lower(),
                "training.kubeflow.org/replica-index": str(i),
            }
            annotations = dict((template.get("metadata") or {}).get("annotations", {}))
            meta = {"name": pod, "labels": labels, "annotations": annotations}
            values = {e["name"]: self._env_value(e, meta) for e in container.get("env", [])}
            values["TF_CONFIG"] = json.dumps(
                {"cluster": cluster, "task": {"type": rtype.lower(), "index": i}}
            )
            out.append({
                "node": f"{rtype.lower()}-{i}", "rtype": rtype, "index": i, "pod": pod,
                "labels": labels, "annotations": annotations, "container": container,
                "command": container.get("command") or [], "args": container.get("args") or [],
                "env": {k: v for k, v in values.items() if v is not None},
            })  # fmt: skip
        return out

    def _env_value(self, var: dict[str, Any], meta: dict[str, Any]) -> str | None:
        """An env var's value as the kubelet gives it (None: an optional one that is missing)."""
        import base64

        from kubernetes.client.exceptions import ApiException

        if "valueFrom" not in var:
            return var.get("value", "")
        source = var["valueFrom"]
        if "fieldRef" in source:
            path = source["fieldRef"]["fieldPath"]
            if path in ("metadata.name", "metadata.namespace"):
                return meta["name"] if path == "metadata.name" else self.namespace
            m = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
            if not m:
                raise NotImplementedError(f"fieldPath {path}")
            return meta[m[1]][m[2]]
        if "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            try:
                data = self.core.read_namespaced_secret(ref["name"], self.namespace).data or {}
            except ApiException as exc:
                if exc.status == 404 and ref.get("optional"):
                    return None
                raise
            if ref["key"] not in data:
                if ref.get("optional"):
                    return None
                raise KeyError(f"secret {ref['name']} has no key {ref['key']}")
            return base64.b64decode(data[ref["key"]]).decode()
        raise NotImplementedError(f"env source {sorted(source)}")

    # ----------------------------------------------------------------------- a job progresses

    def _progress(self, job: LocalJob) -> None:
        if job.state != "Running":
            return
        for node in job.nodes:
            if node.reported or node.process is None:
                continue
            code = node.process.poll()
            if code is None:
                continue
            node.exit_code, node.reported = code, True
            with contextlib.suppress(Exception):  # the pod is being deleted meanwhile
                pod = self.core.read_namespaced_pod(node.pod, self.namespace)
                write_pod_status(self.core, self.namespace, pod, exit_code=code)
        failed = [n for n in job.nodes if n.exit_code not in (None, 0)]
        if failed:
            self._write_job_status(job, "Failed", failed)
        elif all(n.exit_code == 0 for n in job.nodes):
            self._write_job_status(job, "Succeeded")

    def _write_job_status(
        self, job: LocalJob, state: str, failed: list[LocalNode] | None = None
    ) -> None:
        from kubernetes.client.exceptions import ApiException

        job.state = state
        status = (
            trainjob_status(state, *JOBSET_FINISHED.get(state, ("", "")))
            if job.kind == "TrainJob"
            else _tfjob_status(job, state, failed or [])
        )
        try:
            self.custom.patch_namespaced_custom_object_status(
                job.group, job.version, self.namespace, job.plural, job.name, {"status": status}
            )
        except ApiException as exc:
            if exc.status != 404:  # deleted meanwhile
                raise

    def _kill(self, node: LocalNode) -> None:
        process = node.process
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()


def _controller_of(job: dict[str, Any]) -> dict[str, Any]:
    """The ``ownerReference`` an operator gives what it makes for ``job``."""
    meta = job["metadata"]
    return {"apiVersion": job["apiVersion"], "kind": job["kind"], "name": meta["name"],
            "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}  # fmt: skip


def _runtime_patch_labels(job: dict[str, Any], replicated_job: str) -> dict[str, str]:
    """The pod labels a TrainJob's ``runtimePatches`` give ``replicated_job``'s pods."""
    labels: dict[str, str] = {}
    for patch in job["spec"].get("runtimePatches") or []:
        spec = (patch.get("trainingRuntimeSpec") or {}).get("template", {}).get("spec", {})
        for rjob in spec.get("replicatedJobs") or []:
            if rjob.get("name") == replicated_job:
                pod = rjob.get("template", {}).get("spec", {}).get("template", {})
                labels.update((pod.get("metadata") or {}).get("labels") or {})
    return labels


def _tfjob_status(job: LocalJob, state: str, failed: list[LocalNode]) -> dict[str, Any]:
    """As the Training Operator writes it: its conditions, in its words
    (pkg/controller.v1/tensorflow/tfjob_controller.go), and each replica type's counts."""
    ns, name = job.object["metadata"]["namespace"], job.name
    conditions = [
        ("Created", "TFJobCreated", f"TFJob {name} is created."),
        ("Running", "TFJobRunning", f"TFJob {ns}/{name} is running."),
    ]
    if state == "Succeeded":
        conditions.append(("Succeeded", "TFJobSucceeded", f"TFJob {ns}/{name} successfully completed."))  # fmt: skip
    elif state == "Failed":
        rtype = failed[0].rtype
        count = sum(1 for n in failed if n.rtype == rtype)
        conditions.append(("Failed", "TFJobFailed", f"TFJob {ns}/{name} has failed because "
                           f"{count} {rtype} replica(s) failed."))  # fmt: skip
    now = utc_now()
    counts: dict[str, dict[str, int]] = {}
    for node in job.nodes:
        replica = counts.setdefault(node.rtype, {"active": 0, "succeeded": 0, "failed": 0})
        if node.exit_code is None:
            replica["active"] += 1
        else:
            replica["succeeded" if node.exit_code == 0 else "failed"] += 1
    return {
        "conditions": [
            {"type": t, "status": "False" if t == "Running" and state != "Running" else "True",
             "reason": r, "message": m, "lastUpdateTime": now, "lastTransitionTime": now}
            for t, r, m in conditions
        ],
        "replicaStatuses": counts,
    }  # fmt: skip
