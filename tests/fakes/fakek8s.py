"""A Kubernetes API stand-in on 127.0.0.1 for the calls the job launcher makes (contract test).

It speaks the real REST paths and JSON shapes (``kubeflow.org/v1`` TFJobs,
``trainer.kubeflow.org/v1alpha1`` TrainJobs, API discovery, core/v1 pods and logs) that the
official ``kubernetes`` client sends and parses, validates every TFJob it is given against the
Training Operator's OpenAPI types and every TrainJob against Trainer v2's CRD schema
(tests/fakes/crdschema.py), and plays a scripted job lifecycle. It is not a cluster: nothing is
scheduled, and the "operator" only moves the status along the script, unless the scenario is
:class:`LocalOperator` or :class:`LocalJobSet`, which run the nodes as real local processes.

The schema check walks the object through the ``openapi_types``/``attribute_map`` of the Training
Operator SDK's generated models (``kubeflow-training``, generated from the operator's OpenAPI
spec) and of the Kubernetes client's models for the pod template: unknown fields, wrong types and
missing required fields are errors, as the API server's structural schema would report them.
"""

from __future__ import annotations

import json
import os
import re
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_PRIMITIVES = {"str": str, "int": int, "bool": bool, "float": (int, float), "object": object}


def _model_class(name: str) -> Any:
    import kubernetes.client.models as k8s_models
    from kubeflow.training import models as kf_models

    cls = getattr(kf_models, name, None) or getattr(k8s_models, name, None)
    if cls is None:
        raise KeyError(name)
    return cls


def validate(data: Any, type_name: str, path: str = "") -> list[str]:
    """Problems found checking ``data`` against the OpenAPI type ``type_name``."""
    if type_name.startswith("list["):
        if not isinstance(data, list):
            return [f"{path or '.'}: expected a list, got {type(data).__name__}"]
        inner = type_name[5:-1]
        return [p for i, x in enumerate(data) for p in validate(x, inner, f"{path}[{i}]")]
    m = re.fullmatch(r"dict\(str, (.+)\)", type_name)
    if m:
        if not isinstance(data, dict):
            return [f"{path or '.'}: expected an object, got {type(data).__name__}"]
        return [p for k, v in data.items() for p in validate(v, m[1], f"{path}.{k}")]
    if type_name in _PRIMITIVES:
        expected = _PRIMITIVES[type_name]
        if type_name == "int" and isinstance(data, bool):
            return [f"{path}: expected int, got bool"]
        if not isinstance(data, expected):
            return [f"{path}: expected {type_name}, got {type(data).__name__}"]
        return []
    if type_name == "datetime":
        return [] if isinstance(data, str) else [f"{path}: expected a timestamp string"]
    cls = _model_class(type_name)
    if not isinstance(data, dict):
        return [f"{path or '.'}: expected a {type_name} object, got {type(data).__name__}"]
    by_json = {json_key: attr for attr, json_key in cls.attribute_map.items()}
    problems = []
    for key, value in data.items():
        if key not in by_json:
            problems.append(f"{path}.{key}: unknown field in {type_name}")
            continue
        attr = by_json[key]
        problems += validate(value, cls.openapi_types[attr], f"{path}.{key}")
    try:  # the generated constructors reject missing required fields
        cls(**{by_json[k]: v for k, v in data.items() if k in by_json})
    except ValueError as exc:
        problems.append(f"{path or '.'}: {type_name}: {exc}")
    return problems


def validate_tfjob(obj: dict[str, Any]) -> list[str]:
    """Problems of a TFJob object against the operator's kubeflow.org/v1 OpenAPI types."""
    problems = validate(obj, "KubeflowOrgV1TFJob")
    if obj.get("apiVersion") != "kubeflow.org/v1" or obj.get("kind") != "TFJob":
        problems.append("apiVersion/kind must be kubeflow.org/v1 TFJob")
    for rtype, spec in (obj.get("spec", {}).get("tfReplicaSpecs") or {}).items():
        if rtype not in ("Chief", "Worker", "PS", "Evaluator", "Master"):
            problems.append(f".spec.tfReplicaSpecs.{rtype}: not a TFJob replica type")
        names = [
            c.get("name") for c in spec.get("template", {}).get("spec", {}).get("containers", [])
        ]
        if "tensorflow" not in names:
            problems.append(f".spec.tfReplicaSpecs.{rtype}: no container named 'tensorflow'")
    return problems


class Scenario:
    """How the fake operator moves a job along: a list of (replica statuses, condition) steps.

    Each GET of the job advances one step; the last step stays. ``fail_replica`` names the pod
    (e.g. ``worker-1``) that exits non-zero with ``fail_log``.
    """

    def __init__(
        self,
        steps: list[tuple[str, str]],
        fail_replica: str | None = None,
        fail_log: str = "",
    ):
        self.steps = steps
        self.fail_replica = fail_replica
        self.fail_log = fail_log


TFJOBS = re.compile(r"/apis/kubeflow\.org/v1/namespaces/([^/]+)/tfjobs(?:/([^/]+))?")
TRAINJOBS = re.compile(
    r"/apis/trainer\.kubeflow\.org/v1alpha1/namespaces/([^/]+)/trainjobs(?:/([^/]+))?"
)
#: group/version -> the custom resource it serves
API_RESOURCES = {
    ("kubeflow.org", "v1"): ("tfjobs", "TFJob"),
    ("trainer.kubeflow.org", "v1alpha1"): ("trainjobs", "TrainJob"),
}
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
#: the built-in objects the fake keeps (a run's tf.data service, the step's lease): path
#: pattern -> OpenAPI type
OBJECTS = {
    re.compile(r"/api/v1/namespaces/([^/]+)/(services)(?:/([^/]+))?"): "V1Service",
    re.compile(r"/apis/apps/v1/namespaces/([^/]+)/(statefulsets)(?:/([^/]+))?"): "V1StatefulSet",
    re.compile(r"/apis/batch/v1/namespaces/([^/]+)/(jobs)(?:/([^/]+))?"): "V1Job",
    re.compile(
        r"/apis/policy/v1/namespaces/([^/]+)/(poddisruptionbudgets)(?:/([^/]+))?"
    ): "V1PodDisruptionBudget",
    re.compile(
        r"/apis/networking\.k8s\.io/v1/namespaces/([^/]+)/(networkpolicies)(?:/([^/]+))?"
    ): "V1NetworkPolicy",
}


class FakeKubernetes:
    """The stand-in server. Records every request in ``requests``; jobs live in ``jobs``.

    ``serves`` lists the job resources the "cluster" has installed (answered by discovery).
    """

    def __init__(
        self,
        scenario: Scenario,
        errors: list[int] | None = None,
        log_dir: str = "/tmp",
        serves: tuple[str, ...] = ("tfjobs", "trainjobs"),
        trainjob_crd: str = "",
    ):
        self.scenario = scenario
        # the TrainJob CRD this "cluster" has installed (default: Trainer v2.3.0's)
        self.trainjob_crd = trainjob_crd
        self.log_dir = log_dir
        self.serves = serves
        self.errors = list(errors or [])  # status codes answered (once each) before real replies
        self.jobs: dict[tuple[str, str], dict[str, Any]] = {}
        self.deleted: list[tuple[str, str, str | None]] = []
        self.created: list[dict[str, Any]] = []
        self.create_queries: list[dict[str, str]] = []
        self.requests: list[tuple[str, str]] = []
        # Services and StatefulSets by (plural, namespace, name); a StatefulSet's pods are
        # reported ready when ``pods_ready``
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.objects_created: list[dict[str, Any]] = []
        self.objects_deleted: list[tuple[str, str, str, str | None]] = []
        self.pods_ready = True
        # (method, path, body) of every PATCH
        self.patches: list[tuple[str, str, Any]] = []
        # UIDs of every object created, and of those deleted since (the garbage collector's
        # view of owners)
        self.uids: dict[str, tuple[str, str, str]] = {}
        self._gets: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, code: int, body: Any, content_type: str = "application/json") -> None:
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _handle(self, method: str) -> None:
                url = urllib.parse.urlsplit(self.path)
                query = dict(urllib.parse.parse_qsl(url.query))
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                with fake._lock:
                    fake.requests.append((method, url.path))
                    if fake.errors:
                        code = fake.errors.pop(0)
                        return self._send(code, _status(code, "injected"))
                    code, out, ctype = fake.route(method, url.path, query, body)
                self._send(code, out, ctype)

            def do_GET(self) -> None:
                self._handle("GET")

            def do_POST(self) -> None:
                self._handle("POST")

            def do_DELETE(self) -> None:
                self._handle("DELETE")

            def do_PATCH(self) -> None:
                if self.headers.get("Content-Type") != "application/json-patch+json":
                    return self._send(415, _status(415, "only JSON patches here"))
                self._handle("PATCH")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> FakeKubernetes:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if isinstance(self.scenario, LocalOperator):
            self.scenario.stop()
        self._server.shutdown()
        self._server.server_close()

    def api_client(self) -> Any:
        """An official ``kubernetes`` ApiClient pointed at this server."""
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = self.url
        return client.ApiClient(cfg)

    # ------------------------------------------------------------------------------ routing

    def tick(self) -> None:
        """Play the controllers that end a lease, restated from Kubernetes:

        * the Job controller fails a Job once ``activeDeadlineSeconds`` have passed since its
          ``status.startTime`` (``pastActiveDeadline``, pkg/controller/job/job_controller.go),
          with or without pods; it sets ``startTime`` when it first sees the Job (here: on
          creation);
        * the TTL-after-finished controller deletes a finished Job whose
          ``ttlSecondsAfterFinished`` have passed (pkg/controller/ttlafterfinished);
        * the garbage collector deletes an object once none of its owners exists
          (pkg/controller/garbagecollector), for owners this server made (it keeps no pods).
        """
        import time as time_

        now = time_.time()
        for key, obj in list(self.objects.items()):
            if key[0] != "jobs":
                continue
            spec, status = obj["spec"], obj.setdefault("status", {})
            deadline = spec.get("activeDeadlineSeconds")
            running = not status.get("conditions")
            if running and deadline is not None and now - status["_started"] >= deadline:
                status["conditions"] = [{"type": "Failed", "status": "True",
                                         "reason": "DeadlineExceeded"}]  # fmt: skip
                status["_finished"] = now
            ttl = spec.get("ttlSecondsAfterFinished")
            finished = status.get("_finished")
            if finished is not None and ttl is not None and now - finished >= ttl:
                self._remove(key)
        while True:
            live = {self._uid(o) for o in [*self.objects.values(), *self.jobs.values()]}
            stored = [*self.objects.items(), *((("custom", *k), j) for k, j in self.jobs.items())]
            orphans = []
            for key, obj in stored:
                owners = {r["uid"] for r in obj["metadata"].get("ownerReferences") or []}
                owners &= set(self.uids)  # owners this server knows (it keeps no pods)
                if owners and not owners & live:
                    orphans.append(key)
            if not orphans:
                return
            for key in orphans:
                self._remove(key)

    def settle(self) -> None:
        """Run :meth:`tick` now (the server also runs it on every request)."""
        with self._lock:
            self.tick()

    def stored(self) -> set[tuple[str, str]]:
        """``(kind, name)`` of every object the server holds now (jobs included)."""
        with self._lock:
            return {(o["kind"], o["metadata"]["name"]) for o in self.objects.values()} | {
                (j["kind"], j["metadata"]["name"]) for j in self.jobs.values()
            }

    @staticmethod
    def _uid(obj: dict[str, Any]) -> str:
        return obj["metadata"].get("uid", "")

    def _remove(self, key: tuple) -> None:
        if key[0] == "custom":
            if isinstance(self.scenario, LocalOperator):
                self.scenario.stop()
            self.deleted.append((key[1], key[2], "GarbageCollector"))
            self.jobs.pop((key[1], key[2]), None)
            return
        self.objects_deleted.append((*key, "GarbageCollector"))
        self.objects.pop(key, None)

    def _admit(self, body: dict[str, Any]) -> dict[str, Any]:
        """What the API server adds to an object it creates: a UID and a creation time."""
        import datetime as dt
        import time as time_
        import uuid

        body = json.loads(json.dumps(body))
        uid = str(uuid.uuid4())
        body["metadata"]["uid"] = uid
        body["metadata"]["creationTimestamp"] = dt.datetime.now(dt.UTC).strftime(
            "%Y-%m-%dT%H:%M:%SZ"
        )
        if body.get("kind") == "Job":
            body["status"] = {"startTime": body["metadata"]["creationTimestamp"],
                              "_started": time_.time()}  # fmt: skip
        self.uids[uid] = (body.get("kind", ""), body["metadata"].get("namespace", ""),
                          body["metadata"]["name"])  # fmt: skip
        return body

    def route(self, method: str, path: str, query: dict[str, str], body: Any) -> tuple:
        self.tick()
        m = re.fullmatch(r"/apis/([^/]+)/([^/]+)", path)
        if m and method == "GET":
            return self._discovery(m[1], m[2])
        for pattern, plural, check in (
            (TFJOBS, "tfjobs", validate_tfjob),
            (TRAINJOBS, "trainjobs", lambda o: validate_trainjob(o, self.trainjob_crd)),
        ):
            m = pattern.fullmatch(path)
            if m:
                if plural not in self.serves:
                    return (
                        404,
                        _status(404, "the server could not find the requested resource"),
                        "application/json",
                    )
                return self._job_route(method, m[1], m[2], query, body, check)
        for pattern, type_name in OBJECTS.items():
            m = pattern.fullmatch(path)
            if m:
                return self._object_route(method, m[1], m[2], m[3], query, body, type_name)
        m = re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods", path)
        if m and method == "GET":
            key, _, name = query.get("labelSelector", "").partition("=")
            return 200, self._pods(m[1], key, name), "application/json"
        m = re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/log", path)
        if m and method == "GET":
            pod = m[2]
            job = self._job_of_pod(pod)
            expected = "node" if job.get("kind") == "TrainJob" else "tensorflow"
            assert query.get("container") == expected, query
            tail = int(query.get("tailLines", 1000))
            text = self._log(pod).splitlines()[-tail:]
            return 200, ("\n".join(text) + "\n").encode(), "text/plain"
        return 404, _status(404, f"no route {method} {path}"), "application/json"

    def _discovery(self, group: str, version: str) -> tuple:
        served = API_RESOURCES.get((group, version))
        if served is None or served[0] not in self.serves:
            return (
                404,
                _status(404, "the server could not find the requested resource"),
                "application/json",
            )
        plural, kind = served
        return (
            200,
            {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": f"{group}/{version}",
                "resources": [
                    {
                        "name": plural,
                        "singularName": kind.lower(),
                        "namespaced": True,
                        "kind": kind,
                        "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
                    },
                    {
                        "name": f"{plural}/status",
                        "singularName": "",
                        "namespaced": True,
                        "kind": kind,
                        "verbs": ["get", "patch", "update"],
                    },
                ],
            },
            "application/json",
        )

    def _object_route(self, method, ns, plural, name, query, body, type_name) -> tuple:
        json_type = "application/json"
        if method == "POST" and name is None:
            problems = validate(body, type_name)
            if problems:
                return 422, _status(422, "; ".join(problems)), json_type
            key = (plural, ns, body["metadata"]["name"])
            if key in self.objects:
                return 409, _status(409, "AlreadyExists"), json_type
            self.objects[key] = self._admit(body)
            self.objects_created.append(body)
            return 201, _public(self.objects[key]), json_type
        key = (plural, ns, name)
        if name is None or key not in self.objects:
            return 404, _status(404, "NotFound"), json_type
        if method == "GET":
            out = _public(self.objects[key])
            if plural == "statefulsets":
                replicas = out["spec"]["replicas"]
                ready = replicas if self.pods_ready else 0
                out["status"] = {"replicas": replicas, "readyReplicas": ready}
            return 200, out, json_type
        if method == "PATCH":
            import jsonpatch

            self.patches.append((method, f"{plural}/{ns}/{name}", body))
            obj = self.objects[key]
            private = obj.pop("status", None)
            patched = jsonpatch.apply_patch(obj, body)
            problems = validate(patched, type_name)
            if problems:
                obj["status"] = private
                return 422, _status(422, "; ".join(problems)), json_type
            patched["status"] = private
            self.objects[key] = patched
            return 200, _public(patched), json_type
        if method == "DELETE":
            self.objects_deleted.append((plural, ns, name, query.get("propagationPolicy")))
            del self.objects[key]
            return 200, _status(200, "Success"), json_type
        return 405, _status(405, "MethodNotAllowed"), json_type

    def _job_route(self, method, ns, name, query, body, check) -> tuple:
        if method == "POST" and name is None:
            problems = check(body)
            if problems:
                return 422, _status(422, "; ".join(problems)), "application/json"
            key = (ns, body["metadata"]["name"])
            if key in self.jobs:
                return 409, _status(409, "AlreadyExists"), "application/json"
            self.jobs[key] = self._admit(body)
            self.created.append(body)
            self.create_queries.append(query)
            if isinstance(self.scenario, LocalOperator):
                self.scenario.start(body, self.log_dir)
            return 201, body, "application/json"
        if name is None or (ns, name) not in self.jobs:
            return 404, _status(404, "NotFound"), "application/json"
        if method == "GET":
            return 200, self._job_with_status(ns, name), "application/json"
        if method == "DELETE":
            if isinstance(self.scenario, LocalOperator):
                self.scenario.stop()
            self.deleted.append((ns, name, query.get("propagationPolicy")))
            del self.jobs[(ns, name)]
            return 200, _status(200, "Success"), "application/json"
        return 405, _status(405, "MethodNotAllowed"), "application/json"

    def _step(self, ns: str, name: str) -> tuple[str, str]:
        if isinstance(self.scenario, LocalOperator):
            return self.scenario.state()
        n = self._gets.get((ns, name), 0)
        self._gets[(ns, name)] = n + 1
        return self.scenario.steps[min(n, len(self.scenario.steps) - 1)]

    def _job_with_status(self, ns: str, name: str) -> dict[str, Any]:
        job = json.loads(json.dumps(self.jobs[(ns, name)]))
        phase, message = self._step(ns, name)
        if job["kind"] == "TrainJob":
            job["status"] = _trainjob_status(job, phase, message)
            return job
        specs = job["spec"]["tfReplicaSpecs"]
        active = phase in ("Running",)
        job["status"] = {
            "conditions": [
                {"type": "Created", "status": "True", "message": "TFJob created"},
                *(
                    [{"type": phase, "status": "True", "message": message}]
                    if phase != "Created"
                    else []
                ),
            ],
            "replicaStatuses": {
                r: {
                    "active": s["replicas"] if active else 0,
                    "succeeded": s["replicas"] if phase == "Succeeded" else 0,
                    "failed": 1 if phase == "Failed" and r == "Worker" else 0,
                }
                for r, s in specs.items()
            },
        }
        return job

    def _job_of_pod(self, pod: str) -> dict[str, Any]:
        for job in self.jobs.values():
            if any(p == pod for p, _, _ in _nodes(job)):
                return job
        raise KeyError(pod)

    def _pods(self, ns: str, key: str, name: str) -> dict[str, Any]:
        items = []
        job = self.jobs.get((ns, name))
        wanted = (
            JOBSET_NAME if job and job["kind"] == "TrainJob" else "training.kubeflow.org/job-name"
        )
        if job is not None and key == wanted:
            for pod, rtype, i in _nodes(job):
                if isinstance(self.scenario, LocalOperator):
                    failed = self.scenario.procs[pod].poll() not in (None, 0)
                else:
                    failed = self.scenario.fail_replica == f"{rtype}-{i}"
                if job["kind"] == "TrainJob":
                    labels = {
                        JOBSET_NAME: name,
                        "jobset.sigs.k8s.io/replicatedjob-name": "node",
                        "jobset.sigs.k8s.io/job-index": "0",
                        "batch.kubernetes.io/job-completion-index": str(i),
                    }
                    container = "node"
                else:
                    labels = {
                        "training.kubeflow.org/job-name": name,
                        "training.kubeflow.org/replica-type": rtype,
                        "training.kubeflow.org/replica-index": str(i),
                    }
                    container = "tensorflow"
                items.append(
                    {
                        "metadata": {"name": pod, "namespace": ns, "labels": labels},
                        "status": {
                            "phase": "Failed" if failed else "Running",
                            "containerStatuses": [
                                {
                                    "name": container,
                                    "ready": not failed,
                                    "restartCount": 0,
                                    "image": "img",
                                    "imageID": "",
                                    "state": {"terminated": {"exitCode": 1}}
                                    if failed
                                    else {"running": {}},
                                }
                            ],
                        },
                    }
                )
        return {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}

    def _log(self, pod: str) -> str:
        if isinstance(self.scenario, LocalOperator):
            with open(self.scenario.logs[pod], errors="replace") as fh:
                return fh.read()
        for name, rtype, i in _nodes(self._job_of_pod(pod)):
            if name == pod and self.scenario.fail_replica == f"{rtype}-{i}":
                return "starting\n" + self.scenario.fail_log
        return f"{pod}: epoch 1/1\n{pod}: done\n"


def _nodes(job: dict[str, Any]) -> list[tuple[str, str, int]]:
    """``(pod name, replica type, index)`` of each node of a TFJob or TrainJob."""
    name = job["metadata"]["name"]
    if job["kind"] == "TrainJob":
        # JobSet's pod names: <jobset>-<replicated job>-<job index>-<completion index>-<suffix>
        return [
            (f"{name}-node-0-{i}-x{i}", "node", i)
            for i in range(job["spec"]["trainer"]["numNodes"])
        ]
    out = []
    for rtype, spec in job["spec"]["tfReplicaSpecs"].items():
        for i in range(spec["replicas"]):
            out.append((f"{name}-{rtype.lower()}-{i}", rtype.lower(), i))
    return out


def _trainjob_status(job: dict[str, Any], phase: str, message: str) -> dict[str, Any]:
    """A TrainJob status as Trainer v2 writes it: conditions Complete/Failed, and jobsStatus."""
    conditions = []
    if phase == "Succeeded":
        conditions.append(
            {"type": "Complete", "status": "True", "reason": "JobsCompleted", "message": message}
        )
    elif phase == "Failed":
        conditions.append(
            {"type": "Failed", "status": "True", "reason": "JobsFailed", "message": message}
        )
    for c in conditions:
        c["lastTransitionTime"] = "2026-11-23T00:00:00Z"
    running = phase == "Running"
    return {
        "conditions": conditions,
        "jobsStatus": [
            {
                "name": "node",
                "active": 1 if running else 0,
                "ready": 1 if running else 0,
                "succeeded": 1 if phase == "Succeeded" else 0,
                "failed": 1 if phase == "Failed" else 0,
                "suspended": 0,
            }
        ],
    }


def validate_trainjob(obj: dict[str, Any], crd: str = "") -> list[str]:
    """Problems of a TrainJob against a Trainer v2 CRD schema (v2.3.0's unless ``crd`` names
    another; tests/fakes/schemas/)."""
    from fakes.crdschema import TRAINJOB_CRD, validate_crd

    return validate_crd(obj, crd or TRAINJOB_CRD)


def _public(obj: dict[str, Any]) -> dict[str, Any]:
    """A copy of a stored object as the API returns it (the fake's own bookkeeping left out)."""
    out = json.loads(json.dumps(obj))
    status = out.get("status")
    if isinstance(status, dict):
        for key in [k for k in status if k.startswith("_")]:
            del status[key]
    return out


def _status(code: int, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Success" if code < 400 else "Failure",
        "message": message,
        "reason": message,
        "code": code,
    }


class LocalOperator(Scenario):
    """Plays the Training Operator for real on this machine: each replica of a created TFJob runs
    as a local process with the ``TF_CONFIG`` the operator would give it (chief + workers on
    127.0.0.1 ports); the job's status and the pods' logs come from those processes."""

    def __init__(self, command_prefix: list[str], env: dict[str, str]):
        super().__init__([("Created", "")])
        self.command_prefix = command_prefix
        self.env = env
        self.procs: dict[str, Any] = {}
        self.logs: dict[str, str] = {}

    def start(self, job: dict[str, Any], log_dir: str) -> None:
        import socket
        import subprocess

        name = job["metadata"]["name"]
        roles = []
        for rtype, spec in job["spec"]["tfReplicaSpecs"].items():
            for i in range(spec["replicas"]):
                roles.append((rtype.lower(), i, spec["template"]["spec"]["containers"][0]))
        ports = []
        for _ in roles:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                ports.append(s.getsockname()[1])
        cluster: dict[str, list[str]] = {}
        for (rtype, _, _), port in zip(roles, ports, strict=True):
            cluster.setdefault(rtype, []).append(f"127.0.0.1:{port}")
        for rtype, i, container in roles:
            pod = f"{name}-{rtype}-{i}"
            tf_config = {"cluster": cluster, "task": {"type": rtype, "index": i}}
            log = os.path.join(log_dir, f"{pod}.log")
            self.logs[pod] = log
            # the container runs `tfrecord-suite train <args>`; here: this interpreter's CLI
            self.procs[pod] = subprocess.Popen(
                [*self.command_prefix, *container["command"][1:], *container["args"]],
                stdout=open(log, "w"),
                stderr=subprocess.STDOUT,
                env={**self.env, "TF_CONFIG": json.dumps(tf_config)},
            )

    def state(self) -> tuple[str, str]:
        codes = {pod: p.poll() for pod, p in self.procs.items()}
        failed = [pod for pod, c in codes.items() if c not in (None, 0)]
        if failed:
            return "Failed", f"replica {failed[0]} exited with {codes[failed[0]]}"
        if codes and all(c == 0 for c in codes.values()):
            return "Succeeded", "all replicas finished"
        return "Running", ""

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()


RUNTIME_YAML = os.path.join(
    os.path.dirname(__file__), "..", "..", "k8s", "trainer-runtime", "clustertrainingruntime.yaml"
)


class LocalJobSet(LocalOperator):
    """Plays Kubeflow Trainer v2 and the JobSet controller for real on this machine.

    For a created TrainJob it merges the runtime it names (k8s/trainer-runtime/, read from the
    repository) with the TrainJob's trainer fields as Trainer v2 does (image, command, args, env
    upserted, numNodes pods), resolves the runtime's downward-API variables from the labels and
    annotations JobSet and the Job controller give each pod, and runs each node as a local
    process. No ``TF_CONFIG`` is given: the trainer must build it. The one addition a cluster
    would not make is ``TFRS_PEER_ADDRESSES``: the nodes share 127.0.0.1 and need distinct ports,
    where a cluster gives each pod its own DNS name on one port.
    """

    def start(self, job: dict[str, Any], log_dir: str) -> None:
        import socket
        import subprocess

        import yaml

        with open(RUNTIME_YAML) as fh:
            runtime = yaml.safe_load(fh)
        ref = job["spec"]["runtimeRef"]
        assert (ref.get("kind"), ref["name"]) == (
            "ClusterTrainingRuntime",
            runtime["metadata"]["name"],
        ), ref
        (rjob,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
        (container,) = rjob["template"]["spec"]["template"]["spec"]["containers"]
        trainer = job["spec"]["trainer"]
        name, nodes = job["metadata"]["name"], trainer["numNodes"]
        ports = []
        for _ in range(nodes):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                ports.append(s.getsockname()[1])
        peers = ",".join(f"127.0.0.1:{p}" for p in ports)
        command = trainer.get("command") or container["command"]
        for i in range(nodes):
            pod = f"{name}-node-0-{i}-x{i}"
            meta = {
                "labels": {
                    "jobset.sigs.k8s.io/jobset-name": name,
                    "jobset.sigs.k8s.io/replicatedjob-name": rjob["name"],
                    "jobset.sigs.k8s.io/job-index": "0",
                },
                "annotations": {"batch.kubernetes.io/job-completion-index": str(i)},
            }
            env = {e["name"]: _resolve_env(e, meta) for e in container.get("env", [])}
            env.update({e["name"]: e["value"] for e in trainer.get("env", [])})
            env["TFRS_PEER_ADDRESSES"] = peers
            log = os.path.join(log_dir, f"{pod}.log")
            self.logs[pod] = log
            self.procs[pod] = subprocess.Popen(
                [*self.command_prefix, *command[1:], *trainer.get("args", [])],
                stdout=open(log, "w"),
                stderr=subprocess.STDOUT,
                env={**{k: v for k, v in self.env.items() if k != "TF_CONFIG"}, **env},
            )


def _resolve_env(var: dict[str, Any], meta: dict[str, dict[str, str]]) -> str:
    """A container env var's value, its downward-API fieldRef resolved from the pod's metadata."""
    if "value" in var:
        return var["value"]
    path = var["valueFrom"]["fieldRef"]["fieldPath"]
    m = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
    assert m, f"unsupported fieldPath {path}"
    return meta[m[1]][m[2]]


class Artifact:
    """The part of a kfp output artifact the tasks use (uri, path, metadata, logged metrics)."""

    def __init__(self, uri, metadata=None, path=None):
        self.uri = uri
        self.path = uri if path is None else path
        self.metadata = dict(metadata or {})
        self.logged = {}

    def log_metric(self, k, v):
        self.logged[k] = v

    def log_confusion_matrix(self, classes, matrix):
        self.logged["confusion"] = (classes, matrix)


def kubeconfig(tmp_path: Any, url: str) -> str:
    """A kubeconfig file pointing the official client at the stand-in on ``url``."""
    import yaml

    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": url}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "fake", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    return str(path)


def train_step(dataset_ref: str, out: Any, **overrides: Any) -> dict[str, Artifact]:
    """Call the kfp train step's function as its component does, with small settings.

    The artifacts' local paths are under ``out``; any argument of ``tasks.train_task``,
    artifacts included, can be overridden. ``run_id``, ``pod_name``, ``pod_uid`` and
    ``service_account`` are what the downward API would tell the step's pod (environment
    variables, see tfrecord_suite.podinfo). Returns the four artifacts by name.
    """
    import dataclasses
    from unittest import mock

    from tfrecord_suite import podinfo
    from tfrecord_suite.kfp import tasks

    keys = [f.name for f in dataclasses.fields(podinfo.PodInfo)]
    pod = {
        env: overrides.pop(key)
        for env, key in zip(podinfo.FIELDS, keys, strict=True)
        if key in overrides
    }

    artifacts = {
        "model": Artifact(os.path.join(str(out), "model")),
        "metrics": Artifact(""),
        "classification_metrics": Artifact(""),
        "report": Artifact(os.path.join(str(out), "report.md")),
    }
    for name in artifacts:
        if name in overrides:
            artifacts[name] = overrides.pop(name)
    with mock.patch.dict(os.environ, pod):
        tasks.train_task(
            **{
                "dataset_ref": dataset_ref,
                "dataset_digest": "",
                "strategy": "auto",
                "cpu_devices": 1,
                "epochs": 1,
                "batch_size": 8,
                "learning_rate": 0.01,
                "model_fn": "",
                **artifacts,
                **overrides,
            }
        )
    return artifacts
