"""A local stand-in for the Kubeflow Pipelines v2beta1 REST API on 127.0.0.1, for contract tests.

KFP 2.17.0's real API server runs on the one-node cluster (tests/integration/test_kfp.py submits
to it, multi-user); this remains for the unit tests of what that does not cover in
milliseconds (tests/unit/test_submit.py says which). What it cannot prove: anything of the real
server beyond the rules restated below (its SubjectAccessReviews, its validation, its storage).

It implements only the calls ``kfp.Client`` makes for ``tfrecord-suite submit`` (pipelines,
pipeline versions, experiments, runs, recurring runs), records every request with its
``Authorization`` header, checks the request bodies against the v2beta1 shapes, and answers like
the API server does:

* ``GET /apis/v2beta1/healthz`` gives ``tag_name`` (the release) and ``multi_user``, as the API
  server's health handler does (``backend/src/apiserver/server/healthz_server.go``);
* with ``tokens``, every request must carry ``Authorization: Bearer <one of them>`` or gets 401
  (multi-user Kubeflow authenticates the bearer with a TokenReview; behind IAP or Dex, a proxy
  does), and the token used is recorded;
* multi-user: an experiment must carry a namespace ("An experiment cannot have an empty
  namespace in multi-user mode", ``server/experiment_server.go``), a run takes its experiment's;
  single-user: a namespace is dropped (``ReplaceNamespace``, ``resource/resource_manager.go``)
  and recorded in ``ignored_namespaces``.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
import uuid
from email.parser import BytesParser
from email.policy import default
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PREFIX = "/apis/v2beta1"


class FakeKfp:
    """``with FakeKfp() as api: kfp.Client(host=api.url) ...; api.requests``."""

    def __init__(
        self,
        final_state: str = "SUCCEEDED",
        version: str = "2.5.0",
        multi_user: bool = False,
        tokens: tuple[str, ...] = (),
    ):
        self.version = version
        self.multi_user = multi_user
        self.tokens = set(tokens)
        self.ignored_namespaces: list[str] = []
        self.requests: list[dict] = []
        self.errors: list[str] = []
        self.pipelines: dict[str, dict] = {}
        self.versions: dict[str, list[dict]] = {}
        self.experiments: dict[str, dict] = {}
        self.runs: dict[str, dict] = {}
        self.recurring: dict[str, dict] = {}
        self.final_state = final_state
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _reply(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> bytes:
                n = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(n) if n else b""

            def _authorized(self, record: dict) -> bool:
                header = self.headers.get("Authorization")
                record["auth"] = header
                if not api.tokens:
                    return True
                scheme, _, token = (header or "").partition(" ")
                if scheme == "Bearer" and token in api.tokens:
                    return True
                self._reply(401, {"error": "Unauthenticated: no valid bearer token"})
                return False

            def _namespace_ok(self, namespace: str | None, what: str) -> bool:
                if api.multi_user and not namespace:
                    api.errors.append(f"{what} without a namespace in multi-user mode")
                    self._reply(400, {"error": f"Invalid input error: {what} namespace"})
                    return False
                if namespace and not api.multi_user:
                    api.ignored_namespaces.append(namespace)
                return True

            def do_GET(self):
                url = urllib.parse.urlsplit(self.path)
                query = urllib.parse.parse_qs(url.query)
                record = {"method": "GET", "path": url.path, "query": query}
                api.requests.append(record)
                if not self._authorized(record):
                    return None
                if url.path == f"{PREFIX}/healthz":
                    return self._reply(
                        200,
                        {
                            "commit_sha": "0" * 40,
                            "tag_name": api.version,
                            "multi_user": api.multi_user,
                        },
                    )
                if url.path == f"{PREFIX}/pipelines":
                    namespace = query.get("namespace", [""])[0]
                    items = [
                        p for p in api.pipelines.values() if p.get("namespace", "") == namespace
                    ]
                    name = _filtered_name(query)
                    if name is not None:
                        items = [p for p in items if p["display_name"] == name]
                    return self._reply(200, {"pipelines": items, "total_size": len(items)})
                if url.path.startswith(f"{PREFIX}/pipelines/") and url.path.endswith("/versions"):
                    pid = url.path.split("/")[4]
                    versions = api.versions.get(pid, [])
                    name = _filtered_name(query)
                    if name is not None:
                        versions = [v for v in versions if v["display_name"] == name]
                    return self._reply(
                        200, {"pipeline_versions": versions, "total_size": len(versions)}
                    )
                if url.path == f"{PREFIX}/experiments":
                    return self._reply(200, {"experiments": list(api.experiments.values())})
                if url.path.startswith(f"{PREFIX}/runs/"):
                    run = api.runs[url.path.rsplit("/", 1)[1]]
                    run["state"] = api.final_state
                    return self._reply(200, run)
                return self._reply(404, {"error": f"no route {url.path}"})

            def do_POST(self):
                url = urllib.parse.urlsplit(self.path)
                query = urllib.parse.parse_qs(url.query)
                body = self._body()
                record = {"method": "POST", "path": url.path, "query": query}
                api.requests.append(record)
                if not self._authorized(record):
                    return None
                if url.path in (f"{PREFIX}/pipelines/upload", f"{PREFIX}/pipelines/upload_version"):
                    spec, *platform = self._uploaded_yaml(body)
                    record["uploaded"] = spec
                    # kfp-kubernetes' settings (secrets, selectors): the second document
                    record["platform"] = platform[0] if platform else {}
                    if "pipelineSpec" not in spec and "root" not in spec:
                        api.errors.append("upload is not a pipeline spec")
                    if url.path.endswith("/upload"):
                        pid = str(uuid.uuid4())
                        name = query.get("name", ["?"])[0]
                        api.pipelines[pid] = {"pipeline_id": pid, "display_name": name}
                        namespace = query.get("namespace", [""])[0]
                        if namespace and api.multi_user:  # namespaced (shared ones have none)
                            api.pipelines[pid]["namespace"] = namespace
                        version = {
                            "pipeline_id": pid,
                            "pipeline_version_id": str(uuid.uuid4()),
                            "display_name": name,
                        }
                        api.versions[pid] = [version]
                        return self._reply(200, api.pipelines[pid])
                    pid = query["pipelineid"][0]
                    version = {
                        "pipeline_id": pid,
                        "pipeline_version_id": str(uuid.uuid4()),
                        "display_name": query.get("name", ["?"])[0],
                    }
                    api.versions[pid].insert(0, version)
                    return self._reply(200, version)
                payload = json.loads(body or b"{}")
                record["json"] = payload
                if url.path == f"{PREFIX}/experiments":
                    if not payload.get("display_name"):
                        api.errors.append("experiment without display_name")
                    if not self._namespace_ok(payload.get("namespace"), "experiment"):
                        return None
                    if not api.multi_user:
                        payload.pop("namespace", None)
                    eid = str(uuid.uuid4())
                    api.experiments[eid] = {"experiment_id": eid, **payload}
                    return self._reply(200, api.experiments[eid])
                if url.path in (f"{PREFIX}/runs", f"{PREFIX}/recurringruns"):
                    ref = payload.get("pipeline_version_reference") or {}
                    if ref.get("pipeline_id") not in api.pipelines:
                        api.errors.append(f"unknown pipeline in {url.path}")
                    if ref.get("pipeline_version_id") not in {
                        v["pipeline_version_id"]
                        for v in api.versions.get(ref.get("pipeline_id"), [])
                    }:
                        api.errors.append(f"unknown pipeline version in {url.path}")
                    if payload.get("experiment_id") not in api.experiments:
                        api.errors.append(f"unknown experiment in {url.path}")
                    if "parameters" not in (payload.get("runtime_config") or {}):
                        api.errors.append("no runtime_config.parameters")
                    rid = str(uuid.uuid4())
                    if url.path.endswith("/runs"):
                        api.runs[rid] = {"run_id": rid, "state": "RUNNING", **payload}
                        return self._reply(200, api.runs[rid])
                    trigger = payload.get("trigger", {}).get("cron_schedule", {})
                    if not trigger.get("cron"):
                        api.errors.append("recurring run without cron trigger")
                    api.recurring[rid] = {"recurring_run_id": rid, **payload}
                    return self._reply(200, api.recurring[rid])
                return self._reply(404, {"error": f"no route {url.path}"})

            def _uploaded_yaml(self, body: bytes) -> list[dict]:
                import yaml

                head = f"Content-Type: {self.headers['Content-Type']}\r\n\r\n".encode()
                msg = BytesParser(policy=default).parsebytes(head + body)
                for part in msg.iter_parts():
                    if part.get_param("name", header="content-disposition") == "uploadfile":
                        return [d for d in yaml.safe_load_all(part.get_payload(decode=True))
                                if d]  # fmt: skip
                api.errors.append("multipart upload without an uploadfile part")
                return [{}]

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> FakeKfp:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def tokens_seen(self) -> set[str | None]:
        """The ``Authorization`` headers the requests carried."""
        return {r.get("auth") for r in self.requests}


def _filtered_name(query: dict) -> str | None:
    """The ``display_name`` a v2beta1 list filter asks for, if any."""
    flt = query.get("filter", [None])[0]
    if not flt:
        return None
    pred = json.loads(flt)["predicates"][0]
    return pred.get("stringValue", pred.get("string_value"))
