"""A local stand-in for the Kubeflow Pipelines v2beta1 REST API on 127.0.0.1, for contract tests.

It implements only the calls ``kfp.Client`` makes for ``tfrecord-suite submit`` (pipelines,
pipeline versions, experiments, runs, recurring runs), records every request, checks the request
bodies against the v2beta1 shapes, and answers like the API server does.
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

    def __init__(self, final_state: str = "SUCCEEDED"):
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

            def do_GET(self):
                url = urllib.parse.urlsplit(self.path)
                query = urllib.parse.parse_qs(url.query)
                api.requests.append({"method": "GET", "path": url.path, "query": query})
                if url.path == f"{PREFIX}/healthz":
                    return self._reply(200, {"multi_user": False})
                if url.path == f"{PREFIX}/pipelines":
                    items = list(api.pipelines.values())
                    flt = query.get("filter", [None])[0]
                    if flt:
                        f = json.loads(flt)
                        pred = f["predicates"][0]
                        name = pred.get("stringValue", pred.get("string_value"))
                        items = [p for p in items if p["display_name"] == name]
                    return self._reply(200, {"pipelines": items, "total_size": len(items)})
                if url.path.startswith(f"{PREFIX}/pipelines/") and url.path.endswith("/versions"):
                    pid = url.path.split("/")[4]
                    versions = api.versions.get(pid, [])
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
                if url.path in (f"{PREFIX}/pipelines/upload", f"{PREFIX}/pipelines/upload_version"):
                    spec = self._uploaded_yaml(body)
                    record["uploaded"] = spec
                    if "pipelineSpec" not in spec and "root" not in spec:
                        api.errors.append("upload is not a pipeline spec")
                    if url.path.endswith("/upload"):
                        pid = str(uuid.uuid4())
                        name = query.get("name", ["?"])[0]
                        api.pipelines[pid] = {"pipeline_id": pid, "display_name": name}
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

            def _uploaded_yaml(self, body: bytes) -> dict:
                import yaml

                head = f"Content-Type: {self.headers['Content-Type']}\r\n\r\n".encode()
                msg = BytesParser(policy=default).parsebytes(head + body)
                for part in msg.iter_parts():
                    if part.get_param("name", header="content-disposition") == "uploadfile":
                        docs = list(yaml.safe_load_all(part.get_payload(decode=True)))
                        return docs[0]
                api.errors.append("multipart upload without an uploadfile part")
                return {}

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
