"""A Kubeflow Pipelines run's executions and artifacts, read as the KFP UI reads them.

The UI's run details page (frontend/src/mlmd/MlmdUtils.ts) asks ML Metadata, over gRPC-web
through the UI's own server (``/ml_metadata.MetadataStoreService/<Method>``, which it proxies to
the metadata gRPC-web proxy), for the run's context (type ``system.PipelineRun``, named by the
run's id), the executions in it, their events and the artifacts those name, and the artifact
types. This does the same calls, in the same binary gRPC-web framing, and prints JSON:
``{"executions": [{"name", "state", "properties", "outputs": {name: artifact}}], ...}`` where an
artifact is ``{"type", "uri", "properties": custom properties}``.

Runs in a Python with ``ml-metadata`` (its protobuf messages; it pins ``protobuf<5``, so not the
suite's environment)::

    python run_lineage.py http://UI_HOST:PORT RUN_ID [--header name:value ...]
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
import urllib.request
from typing import Any

from google.protobuf import json_format
from ml_metadata.proto import metadata_store_pb2 as mlmd
from ml_metadata.proto import metadata_store_service_pb2 as service

SERVICE = "ml_metadata.MetadataStoreService"
RUN_CONTEXT_TYPE = "system.PipelineRun"  # MlmdUtils.ts KFP_V2_RUN_CONTEXT_TYPE


class GrpcWeb:
    """Unary calls to MetadataStoreService in gRPC-web's binary framing (``mode=grpcweb``)."""

    def __init__(self, base: str, headers: dict[str, str]) -> None:
        self.base = base.rstrip("/")
        self.headers = headers

    def call(self, method: str, request: Any, response_type: type) -> Any:
        """``method(request)``: one data frame out, data and trailer frames back."""
        body = request.SerializeToString()
        http = urllib.request.Request(
            f"{self.base}/{SERVICE}/{method}",
            data=b"\x00" + struct.pack(">I", len(body)) + body,
            headers={
                "Content-Type": "application/grpc-web+proto",
                "X-Grpc-Web": "1",
                "Accept": "application/grpc-web+proto",
                **self.headers,
            },
        )
        with urllib.request.urlopen(http, timeout=60) as answer:
            payload = answer.read()
        message, trailers = b"", {}
        while payload:
            flag, length = payload[0], struct.unpack(">I", payload[1:5])[0]
            frame, payload = payload[5 : 5 + length], payload[5 + length :]
            if flag & 0x80:  # the trailer frame: "grpc-status: 0\r\ngrpc-message: ...\r\n"
                for line in frame.decode().split("\r\n"):
                    key, _, value = line.partition(":")
                    if key:
                        trailers[key.strip().lower()] = value.strip()
            else:
                message += frame
        status = trailers.get("grpc-status", answer.headers.get("grpc-status", "0"))
        if status != "0":
            detail = trailers.get("grpc-message", answer.headers.get("grpc-message", ""))
            raise RuntimeError(f"{method}: gRPC status {status}: {detail}")
        response = response_type()
        response.ParseFromString(message)
        return response


def _value(value: mlmd.Value) -> Any:
    """A property's value as JSON holds it."""
    kind = value.WhichOneof("value")
    if kind == "struct_value":
        return json_format.MessageToDict(value.struct_value)
    return getattr(value, kind) if kind else None


def lineage(store: GrpcWeb, run_id: str) -> dict[str, Any]:
    """The run's executions with their output artifacts (MlmdUtils.ts's calls, in its order)."""
    context = store.call(
        "GetContextByTypeAndName",
        service.GetContextByTypeAndNameRequest(type_name=RUN_CONTEXT_TYPE, context_name=run_id),
        service.GetContextByTypeAndNameResponse,
    ).context
    if not context.id:
        raise RuntimeError(f"no {RUN_CONTEXT_TYPE} context named {run_id}")
    executions = store.call(
        "GetExecutionsByContext",
        service.GetExecutionsByContextRequest(context_id=context.id),
        service.GetExecutionsByContextResponse,
    ).executions
    events = store.call(
        "GetEventsByExecutionIDs",
        service.GetEventsByExecutionIDsRequest(execution_ids=[e.id for e in executions]),
        service.GetEventsByExecutionIDsResponse,
    ).events
    artifacts = {
        a.id: a
        for a in store.call(
            "GetArtifactsByID",
            service.GetArtifactsByIDRequest(artifact_ids=sorted({e.artifact_id for e in events})),
            service.GetArtifactsByIDResponse,
        ).artifacts
    }
    types = {
        t.id: t.name
        for t in store.call(
            "GetArtifactTypesByID",
            service.GetArtifactTypesByIDRequest(
                type_ids=sorted({a.type_id for a in artifacts.values()})
            ),
            service.GetArtifactTypesByIDResponse,
        ).artifact_types
    }
    out = []
    for execution in executions:
        outputs = {}
        for event in events:
            if event.execution_id != execution.id or event.type != mlmd.Event.OUTPUT:
                continue
            artifact = artifacts[event.artifact_id]
            # the event's path names the output (MlmdUtils.ts getArtifactNameFromEvent)
            name = event.path.steps[0].key if event.path.steps else str(artifact.id)
            outputs[name] = {
                "type": types.get(artifact.type_id, ""),
                "uri": artifact.uri,
                "properties": {k: _value(v) for k, v in artifact.custom_properties.items()},
            }
        out.append(
            {
                "name": _value(execution.custom_properties["display_name"])
                if "display_name" in execution.custom_properties
                else execution.name,
                "state": mlmd.Execution.State.Name(execution.last_known_state),
                "properties": {k: _value(v) for k, v in execution.custom_properties.items()},
                "outputs": outputs,
            }
        )
    return {"context": context.name, "executions": out}


def main(argv: list[str] | None = None) -> int:
    """Print the run's lineage as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", help="the UI's address, e.g. http://10.244.0.1:32311")
    parser.add_argument("run_id")
    parser.add_argument("--header", action="append", default=[], help="name:value, repeatable")
    args = parser.parse_args(argv)
    headers = dict(h.split(":", 1) for h in args.header)
    json.dump(lineage(GrpcWeb(args.base, headers), args.run_id), sys.stdout, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
