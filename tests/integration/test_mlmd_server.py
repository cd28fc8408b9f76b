"""Our MLMD gRPC server (tests/cluster/mlmd/server.py) driven by upstream's own client.

The server and the client both run in the MLMD Python (ml-metadata==1.17.1, protobuf<5: not
the suite's environment) that ``tests/realparts/build.sh mlmd`` makes (``make test`` does), or
TFRS_MLMD_PYTHON; without either the tests skip, and under CI=true they fail. The client is the wheel's ``MetadataStore`` over gRPC
(``MetadataStoreClientConfig``), as KFP's driver and launcher are clients over gRPC: it writes
types, artifacts, an execution, a context, attributions, associations and events, reads them
back, and checks that the store's errors come back as the library's exceptions (the status
codes the server maps). A second server over the same SQLite file reads the same data. The
MySQL backend is run where a MariaDB server binary is installed (plain skip otherwise).

Make the MLMD Python and run them::

    bash tests/realparts/build.sh mlmd
    pytest tests/integration/test_mlmd_server.py
"""

import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import support

from realparts.processes import WaitError, free_port, wait_for

pytestmark = pytest.mark.slow

SERVER = Path(__file__).resolve().parents[1] / "cluster" / "mlmd" / "server.py"
START_LINE = re.compile(r"MetadataStoreService on 0\.0\.0\.0:(\d+), store (.+)$")

#: Upstream's client over gRPC. ``write`` puts one small lineage and checks errors; ``read``
#: (argv: the ids ``write`` returned) reads it back. Both print one JSON object.
CLIENT = r"""
import json, sys, threading

import grpc
from ml_metadata import errors
from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2 as pb
from ml_metadata.proto import metadata_store_service_pb2 as svc
from ml_metadata.proto import metadata_store_service_pb2_grpc as svc_grpc

port, phase = int(sys.argv[1]), sys.argv[2]
config = pb.MetadataStoreClientConfig(host="127.0.0.1", port=port)
store = metadata_store.MetadataStore(config)


def error_of(call):
    try:
        call()
    except errors.StatusError as error:
        return [type(error).__name__, str(error)]
    return None


def read(ids):
    [dataset] = store.get_artifact_types_by_id([ids["artifact_type"]])
    artifacts = store.get_artifacts_by_id(ids["artifacts"])
    [execution] = store.get_executions_by_id([ids["execution"]])
    [context] = store.get_contexts_by_id([ids["context"]])
    return {
        "artifact_type": [dataset.name, {k: v for k, v in dataset.properties.items()}],
        "artifacts": sorted(
            [a.id, a.name, a.uri, a.properties["rows"].int_value,
             a.custom_properties["split"].string_value]
            for a in artifacts
        ),
        "by_type_and_name": store.get_artifact_by_type_and_name("Dataset", "train").id,
        "execution": [execution.name, pb.Execution.State.Name(execution.last_known_state)],
        "context": [context.name, context.custom_properties["namespace"].string_value],
        "context_by_name": store.get_context_by_type_and_name("PipelineRun", "run-1").id,
        "artifacts_in_context": sorted(a.id for a in store.get_artifacts_by_context(ids["context"])),
        "executions_in_context": [e.id for e in store.get_executions_by_context(ids["context"])],
        "contexts_of_artifact": [c.name for c in store.get_contexts_by_artifact(ids["artifacts"][0])],
        "events": sorted(
            [e.artifact_id, e.execution_id, pb.Event.Type.Name(e.type)]
            for e in store.get_events_by_execution_ids([ids["execution"]])
        ),
        "parents_of_child": [c.name for c in store.get_parent_contexts_by_context(ids["child"])],
    }


if phase == "write":
    dataset = pb.ArtifactType(name="Dataset")
    dataset.properties["rows"] = pb.INT
    ids = {"artifact_type": store.put_artifact_type(dataset)}
    train = pb.Artifact(type_id=ids["artifact_type"], name="train", uri="s3://b/train")
    train.properties["rows"].int_value = 100
    train.custom_properties["split"].string_value = "train"
    evaluation = pb.Artifact(type_id=ids["artifact_type"], name="eval", uri="s3://b/eval")
    evaluation.custom_properties["split"].string_value = "eval"
    ids["artifacts"] = store.put_artifacts([train, evaluation])
    shard = store.put_execution_type(pb.ExecutionType(name="Shard"))
    [ids["execution"]] = store.put_executions(
        [pb.Execution(type_id=shard, name="shard-1", last_known_state=pb.Execution.COMPLETE)]
    )
    run_type = store.put_context_type(pb.ContextType(name="PipelineRun"))
    run = pb.Context(type_id=run_type, name="run-1")
    run.custom_properties["namespace"].string_value = "kubeflow"
    child = pb.Context(type_id=run_type, name="run-1-child")
    [ids["context"], ids["child"]] = store.put_contexts([run, child])
    store.put_parent_contexts([pb.ParentContext(child_id=ids["child"], parent_id=ids["context"])])
    store.put_attributions_and_associations(
        [pb.Attribution(context_id=ids["context"], artifact_id=i) for i in ids["artifacts"]],
        [pb.Association(context_id=ids["context"], execution_id=ids["execution"])],
    )
    store.put_events(
        [pb.Event(artifact_id=ids["artifacts"][0], execution_id=ids["execution"], type=pb.Event.INPUT),
         pb.Event(artifact_id=ids["artifacts"][1], execution_id=ids["execution"], type=pb.Event.OUTPUT)]
    )

    conflicting = pb.ArtifactType(name="Dataset")
    conflicting.properties["rows"] = pb.STRING
    stub = svc_grpc.MetadataStoreServiceStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
    try:
        stub.GetLineageGraph(svc.GetLineageGraphRequest())
        lineage_graph = "OK"
    except grpc.RpcError as error:
        lineage_graph = error.code().name
    result = {
        "ids": ids,
        "read": read(ids),
        "type_conflict": error_of(lambda: store.put_artifact_type(conflicting)),
        "context_twice": error_of(lambda: store.put_contexts([pb.Context(type_id=run_type, name="run-1")])),
        "missing_type": error_of(lambda: store.get_artifact_type("NoSuchType")),
        "missing_artifact": [a.id for a in store.get_artifacts_by_id([999999])],
        "missing_by_name": store.get_artifact_by_type_and_name("Dataset", "nope") is None,
        "no_type_id": error_of(lambda: store.put_artifacts([pb.Artifact(uri="s3://b/x")])),
        "lineage_graph": lineage_graph,
    }

    # eight clients at once, each on its own channel: every write lands, none is refused
    written, failed = [], []
    def writer(n):
        client = metadata_store.MetadataStore(config)
        try:
            for i in range(10):
                written.extend(client.put_artifacts(
                    [pb.Artifact(type_id=ids["artifact_type"], uri=f"s3://b/w{n}/{i}")]))
        except Exception as error:
            failed.append(repr(error))
    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    result["concurrent"] = {"distinct_ids": len(set(written)), "failed": failed}
    result["artifacts_of_type"] = len(store.get_artifacts_by_type("Dataset"))
else:
    result = {"read": read(json.loads(sys.argv[3]))}
print(json.dumps(result))
"""


def unavailable(reason: str) -> None:
    """Skip, or fail under CI, where the MLMD Python must be there."""
    support.unavailable(f"the MLMD server: {reason}")


@pytest.fixture(scope="module")
def mlmd_python() -> str:
    """A Python with ml-metadata (``build.sh mlmd``, or TFRS_MLMD_PYTHON), checked to import it."""
    from realparts import mlmd

    python = mlmd.python(build=False)
    if not python:
        unavailable("no ml-metadata environment: `bash tests/realparts/build.sh mlmd` (make "
                    "test builds it) or TFRS_MLMD_PYTHON")  # fmt: skip
    probe = subprocess.run(
        [python, "-c", "import grpc, ml_metadata; print(ml_metadata.__version__)"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if probe.returncode != 0:
        unavailable(f"TFRS_MLMD_PYTHON={python} cannot import ml_metadata: {probe.stderr[-500:]}")
    return python


@contextmanager
def mlmd_server(python: str, *store_flags: str) -> Iterator[tuple[int, str]]:
    """Our server on a free port; yields (port, the start line's store); SIGTERM at the end.

    After the block it asserts a graceful stop (exit 0) and that the start line was all the
    server wrote.
    """
    proc = subprocess.Popen(
        [python, str(SERVER), "--port", "0", *store_flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        ready, _, _ = select.select([proc.stderr], [], [], 60)
        line = proc.stderr.readline() if ready else ""
        match = START_LINE.search(line.strip())
        if match is None:
            proc.kill()
            out, err = proc.communicate(timeout=30)
            raise AssertionError(f"server did not start: {line}{err}{out}")
        yield int(match.group(1)), match.group(2)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, f"server exit {proc.returncode}: {err}"
    assert (out, err) == ("", ""), f"the server wrote more than its start line: {out}{err}"


def client(python: str, port: int, phase: str, *args: str) -> dict:
    """Run upstream's client (CLIENT) against the server; its JSON answer."""
    proc = subprocess.run(
        [python, "-c", CLIENT, str(port), phase, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def check_written(result: dict) -> None:
    """What ``write`` got back: the lineage as written and the store's errors as exceptions."""
    ids, read = result["ids"], result["read"]
    train, evaluation = ids["artifacts"]
    assert read["artifact_type"] == ["Dataset", {"rows": 1}]  # 1: PropertyType INT
    assert read["artifacts"] == sorted(
        [
            [train, "train", "s3://b/train", 100, "train"],
            [evaluation, "eval", "s3://b/eval", 0, "eval"],
        ]
    )
    assert read["by_type_and_name"] == train
    assert read["execution"] == ["shard-1", "COMPLETE"]
    assert read["context"] == ["run-1", "kubeflow"]
    assert read["context_by_name"] == ids["context"]
    assert read["artifacts_in_context"] == sorted([train, evaluation])
    assert read["executions_in_context"] == [ids["execution"]]
    assert read["contexts_of_artifact"] == ["run-1"]
    assert read["events"] == sorted(
        [[train, ids["execution"], "INPUT"], [evaluation, ids["execution"], "OUTPUT"]]
    )
    assert read["parents_of_child"] == ["run-1"]

    # the store's status codes, through our server, become the library's exceptions
    assert result["type_conflict"][0] == "AlreadyExistsError"
    assert "Type already exists with different properties" in result["type_conflict"][1]
    assert result["context_twice"][0] == "AlreadyExistsError"
    assert result["missing_type"][0] == "NotFoundError"
    assert "NoSuchType" in result["missing_type"][1]
    assert result["missing_artifact"] == []  # upstream answers a missing id with nothing
    assert result["missing_by_name"] is True
    assert result["no_type_id"][0] == "InvalidArgumentError"
    assert result["lineage_graph"] == "UNIMPLEMENTED"  # not in the wheel's extension

    assert result["concurrent"] == {"distinct_ids": 80, "failed": []}
    assert result["artifacts_of_type"] == 82


def test_upstream_client_round_trip_on_sqlite_and_restart(mlmd_python, tmp_path):
    db = tmp_path / "volume" / "mlmd.sqlite"
    db.parent.mkdir()
    with mlmd_server(mlmd_python, "--sqlite-path", str(db)) as (port, store):
        assert store == f"sqlite {db}"
        written = client(mlmd_python, port, "write")
    check_written(written)
    assert db.stat().st_size > 0

    # a new server over the same file (a pod restarted on its volume) has it all
    with mlmd_server(mlmd_python, "--sqlite-path", str(db)) as (port, _):
        again = client(mlmd_python, port, "read", json.dumps(written["ids"]))
    assert again["read"] == written["read"]


#: Upstream's client: the artifact types' names, or the error's class name.
TYPE_NAMES = r"""
import sys
from ml_metadata import errors
from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2 as pb
store = metadata_store.MetadataStore(pb.MetadataStoreClientConfig(host="127.0.0.1", port=int(sys.argv[1])))
try:
    print(sorted(t.name for t in store.get_artifact_types() if not t.name.startswith("mlmd.")))
except errors.StatusError as error:
    print(type(error).__name__)
"""


def test_each_call_connects_so_a_lost_store_is_unavailable_then_back(mlmd_python, tmp_path):
    volume = tmp_path / "volume"
    volume.mkdir()
    db = volume / "mlmd.sqlite"
    with mlmd_server(mlmd_python, "--sqlite-path", str(db)) as (port, _):

        def type_names() -> str:
            proc = subprocess.run(
                [mlmd_python, "-c", TYPE_NAMES, str(port)],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert proc.returncode == 0, proc.stderr[-2000:]
            return proc.stdout.strip()

        assert type_names() == "[]"
        volume.rename(tmp_path / "away")  # the volume gone: the file cannot be opened
        assert type_names() == "UnavailableError"
        (tmp_path / "away").rename(volume)  # back: the next call connects again
        assert type_names() == "[]"


def test_a_store_that_cannot_be_created_exits_with_its_error(mlmd_python, tmp_path):
    proc = subprocess.run(
        [mlmd_python, str(SERVER), "--port", "0", "--sqlite-path", str(tmp_path / "no" / "db")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert proc.stderr.startswith("mlmd-server: ")
    assert "MetadataStoreService on" not in proc.stderr


@pytest.fixture
def mariadb(tmp_path) -> Iterator[int]:
    """A MariaDB server of this test's own on 127.0.0.1 (no grant tables); yields its port."""
    mariadbd = shutil.which("mariadbd") or shutil.which("mariadbd", path="/usr/sbin")
    install = shutil.which("mariadb-install-db")
    if mariadbd is None or install is None:
        pytest.skip("no MariaDB server installed (mariadbd, mariadb-install-db)")
    data, port = tmp_path / "mariadb", free_port()
    user = ["--user=root"] if os.geteuid() == 0 else []
    subprocess.run(
        [install, "--no-defaults", f"--datadir={data}", "--skip-test-db", *user],
        check=True,
        capture_output=True,
        timeout=120,
    )
    proc = subprocess.Popen(
        [mariadbd, "--no-defaults", f"--datadir={data}", f"--socket={tmp_path / 'mariadb.sock'}",
         f"--port={port}", "--bind-address=127.0.0.1", "--skip-grant-tables",
         f"--log-error={tmp_path / 'mariadb.err'}", f"--pid-file={tmp_path / 'mariadb.pid'}",
         "--innodb-buffer-pool-size=16M", *user],
    )  # fmt: skip

    def listening() -> bool:
        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", port)) == 0

    try:
        try:
            wait_for(listening, 60, "mariadbd", alive=lambda: proc.poll() is None, interval=0.2)
        except WaitError:
            assert proc.poll() is None, (tmp_path / "mariadb.err").read_text()[-2000:]
            raise AssertionError("mariadbd did not listen within 60 s") from None
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_upstream_client_round_trip_on_mysql(mlmd_python, mariadb):
    flags = ["--mysql-host", "127.0.0.1", "--mysql-port", str(mariadb), "--mysql-user", "root"]
    with mlmd_server(mlmd_python, *flags, "--mysql-database", "mlmd") as (port, store):
        assert store == f"mysql 127.0.0.1:{mariadb}/mlmd"
        written = client(mlmd_python, port, "write")
    check_written(written)
    with mlmd_server(mlmd_python, *flags, "--mysql-database", "mlmd") as (port, _):
        again = client(mlmd_python, port, "read", json.dumps(written["ids"]))
    assert again["read"] == written["read"]
