"""ML Metadata's gRPC service (``ml_metadata.MetadataStoreService``) over the ml-metadata wheel.

Kubeflow Pipelines' driver and launcher talk to MLMD at ``metadata-grpc-service:8080``.
Upstream serves that with a C++ binary that cannot be built here; this module stands in for it.

**The transport is ours, the store is upstream's.** This file is only the gRPC server: it
takes each request's bytes, hands them unparsed to the function of the same name in the wheel's
pybind11 extension (``ml_metadata.metadata_store.pywrap.metadata_store_extension``), and sends
back its response bytes, or its status code and message as the gRPC status. The schema, its
creation and upgrade, every query and every RPC's semantics (what is NOT_FOUND, what is
ALREADY_EXISTS, what an empty answer is) are upstream's C++ MetadataStore, compiled into the
wheel: the same code upstream's server links. The list of RPCs is read from the service
descriptor the wheel ships, not written here. Mirrored from upstream's server
(metadata_store_server_main.cc, metadata_store_service_impl.cc): the schema is created or
upgraded once at start (``enable_upgrade_migration``), then every RPC connects a store of its
own from the same config with default migration options (about 2 ms on SQLite here), so a
store that comes back after an outage serves the next call; a connection that fails is answered
UNAVAILABLE (upstream passes on the connection's own status; the extension raises it as a
plain RuntimeError with no code), which KFP's client retries as it does ABORTED.

Three RPCs the descriptor declares have no function in the wheel's extension
(``GetParentContextsByContexts``, ``GetChildrenContextsByContexts``, ``GetLineageGraph``, as of
ml-metadata 1.17.1): they answer UNIMPLEMENTED. KFP's driver and launcher client
(backend/src/v2/metadata/client.go, as read) calls none of them; KFP's UI was not checked.

Upstream's flags are taken under upstream's names too (``--grpc_port``, ``--mysql_config_*``,
``--enable_database_upgrade=true``, ``--grpc_channel_arguments``), so upstream's Deployment runs
it unchanged; the image puts it at upstream's ``/bin/metadata_store_server``.

What this cannot prove: upstream's C++ server's other flags (``--metadata_store_server_config_file``,
``--downgrade_db_schema_version``: not offered), TLS (the server
here is plaintext only), its startup retries on ABORTED, its concurrency (it runs RPCs in
parallel, each on its own database connection; here they run one at a time, see ``_LOCK``), and
any connection handling of its own.

Backends: SQLite at a file (``--sqlite-path``) and MySQL (``--mysql-host`` and the rest, as
upstream's ``--mysql_config_*``; the wheel's extension is built with MySQL's client). Both are
exercised by tests/integration/test_mlmd_server.py: SQLite wherever the MLMD Python exists,
MySQL where a MariaDB server binary (``mariadbd``) is also installed.

Run with a Python that has ``ml-metadata==1.17.1`` (it pins ``protobuf<5``, so not the suite's
environment)::

    python server.py --sqlite-path /data/mlmd.sqlite
    python server.py --mysql-host mysql --mysql-database metadb --mysql-user root
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Callable
from concurrent import futures

import grpc
from ml_metadata.metadata_store.pywrap.metadata_store_extension import (
    metadata_store as pywrap,
)
from ml_metadata.proto import metadata_store_pb2, metadata_store_service_pb2

SERVICE = metadata_store_service_pb2.DESCRIPTOR.services_by_name["MetadataStoreService"]
#: Seconds in-flight RPCs get to finish after SIGTERM or SIGINT.
GRACE_SECONDS = 10.0

#: MLMD's codes are absl's canonical codes, which are gRPC's (errors.py in the wheel).
_STATUS = {code.value[0]: code for code in grpc.StatusCode}

# One RPC at a time. The extension holds the GIL for a whole call (it declares no
# gil_scoped_release; measured: a Python thread does not run during a long PutArtifacts), so
# calls could not overlap anyway; the lock says so and keeps it so if a later wheel released
# the GIL. SQLite takes one writer at a time: two connections writing at once can fail with
# "database is locked". Each call's store object is its own (see _handler), so no handle is
# ever shared between threads.
_LOCK = threading.Lock()

log = logging.getLogger("mlmd-server")


def connection_config(args: argparse.Namespace) -> metadata_store_pb2.ConnectionConfig:
    """The store's connection config from the command line.

    Args:
        args: The parsed flags (see ``parse_args``).

    Returns:
        A ConnectionConfig for SQLite at ``args.sqlite_path``, or for MySQL.
    """
    config = metadata_store_pb2.ConnectionConfig()
    if args.sqlite_path:
        config.sqlite.filename_uri = args.sqlite_path
        config.sqlite.connection_mode = (
            metadata_store_pb2.SqliteMetadataSourceConfig.READWRITE_OPENCREATE
        )
    else:
        config.mysql.host = args.mysql_host
        config.mysql.port = args.mysql_port
        config.mysql.database = args.mysql_database
        config.mysql.user = args.mysql_user
        config.mysql.password = args.mysql_password
    return config


def describe(config: metadata_store_pb2.ConnectionConfig) -> str:
    """The store's kind and place for the start line, without the password.

    Args:
        config: The store's connection config.

    Returns:
        For example ``sqlite /data/mlmd.sqlite`` or ``mysql mysql:3306/metadb``.
    """
    if config.HasField("sqlite"):
        return f"sqlite {config.sqlite.filename_uri}"
    return f"mysql {config.mysql.host}:{config.mysql.port}/{config.mysql.database}"


def create_schema(config: metadata_store_pb2.ConnectionConfig) -> None:
    """Connect once with upgrade migration on: creates the schema, or upgrades an older one.

    Args:
        config: The store's connection config.

    Raises:
        RuntimeError: The extension's error when the store cannot be reached or migrated.
    """
    migration = metadata_store_pb2.MigrationOptions(enable_upgrade_migration=True)
    pywrap.CreateMetadataStore(config.SerializeToString(), migration.SerializeToString())


def _handler(method: str, config: bytes) -> Callable[[bytes, grpc.ServicerContext], bytes]:
    """A unary handler that forwards the request's bytes to the extension's ``method``.

    It calls the extension as the wheel's own ``MetadataStore._pywrap_cc_call`` does:
    ``function(store, request_bytes)`` returns ``(response_bytes, message_bytes, code)``; a
    code other than 0 is the error, its message UTF-8.

    Args:
        method: The RPC's name, as the service descriptor spells it.
        config: The serialized ConnectionConfig each call connects with.

    Returns:
        The handler; it answers UNIMPLEMENTED where the extension has no ``method``.
    """
    function = getattr(pywrap, method, None)
    no_migration = metadata_store_pb2.MigrationOptions().SerializeToString()

    def forward(request: bytes, context: grpc.ServicerContext) -> bytes:
        if function is None:
            context.abort(
                grpc.StatusCode.UNIMPLEMENTED,
                f"{method} is not in the ml-metadata wheel's store extension",
            )
        with _LOCK:
            try:
                # a store per call, as upstream's server connects one per RPC
                store = pywrap.CreateMetadataStore(config, no_migration)
            except RuntimeError as error:
                context.abort(grpc.StatusCode.UNAVAILABLE, f"store connection: {error}")
            response, message, code = function(store, request)
            del store  # the connection closes here, inside the lock
        if code != 0:
            status = _STATUS.get(code, grpc.StatusCode.UNKNOWN)
            context.abort(status, message.decode("utf-8", errors="replace"))
        return response

    return forward


def generic_handler(config: metadata_store_pb2.ConnectionConfig) -> grpc.GenericRpcHandler:
    """Every RPC of ``MetadataStoreService``, as raw bytes in and out.

    The request deserializer and response serializer are left out (None): gRPC then hands the
    handler the request's bytes and sends the bytes it returns, so no message is parsed here.

    Args:
        config: The store's connection config.

    Returns:
        The service's handler, for ``grpc.Server.add_generic_rpc_handlers``.
    """
    serialized = config.SerializeToString()
    handlers = {}
    for method in SERVICE.methods:
        if method.client_streaming or method.server_streaming:
            raise RuntimeError(f"{method.full_name} streams; only unary RPCs are forwarded")
        handlers[method.name] = grpc.unary_unary_rpc_method_handler(
            _handler(method.name, serialized)
        )
    return grpc.method_handlers_generic_handler(SERVICE.full_name, handlers)


def _channel_arguments(text: str) -> list[tuple[str, int | str]]:
    """``a=1,b=x`` -> ``[("a", 1), ("b", "x")]``: gRPC options as upstream's flag gives them."""
    options: list[tuple[str, int | str]] = []
    for pair in filter(None, text.split(",")):
        name, sep, value = pair.partition("=")
        if not sep:
            raise argparse.ArgumentTypeError(f"{pair!r}: write name=value")
        options.append((name.strip(), int(value) if value.strip().isdigit() else value.strip()))
    return options


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line: a port and exactly one store.

    Args:
        argv: The arguments, ``sys.argv[1:]`` when None.

    Returns:
        The parsed flags.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # each flag also under upstream's name (metadata_store_server_main.cc), so upstream's
    # Deployment (manifests/kustomize/base/metadata/base) runs this with its own command line
    parser.add_argument(
        "--port", "--grpc_port", type=int, default=8080,
        help="port on 0.0.0.0 (0: any free one; logged)",
    )  # fmt: skip
    store = parser.add_mutually_exclusive_group(required=True)
    store.add_argument("--sqlite-path", help="SQLite database file (created if absent)")
    store.add_argument("--mysql-host", "--mysql_config_host", help="MySQL host")
    parser.add_argument("--mysql-port", "--mysql_config_port", type=int, default=3306)
    parser.add_argument("--mysql-database", "--mysql_config_database", default="metadb")
    parser.add_argument("--mysql-user", "--mysql_config_user", default="")
    parser.add_argument("--mysql-password", "--mysql_config_password", default="")
    parser.add_argument(
        "--enable_database_upgrade", choices=("true",), default="true",
        help="the schema is always created or upgraded at start (only true is taken)",
    )  # fmt: skip
    parser.add_argument(
        "--grpc_channel_arguments", type=_channel_arguments, default=[],
        help="gRPC server options, upstream's form: name=value,name=value "
        "(e.g. grpc.max_receive_message_length=104857600)",
    )  # fmt: skip
    return parser.parse_args(argv)


def serve(args: argparse.Namespace) -> None:
    """Create or upgrade the schema, serve until SIGTERM or SIGINT, then stop gracefully.

    Args:
        args: The parsed flags (see ``parse_args``).
    """
    config = connection_config(args)
    create_schema(config)
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=8), options=args.grpc_channel_arguments
    )
    server.add_generic_rpc_handlers((generic_handler(config),))
    port = server.add_insecure_port(f"0.0.0.0:{args.port}")
    if port == 0:
        raise RuntimeError(f"cannot bind 0.0.0.0:{args.port}")
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    server.start()
    log.info("MetadataStoreService on 0.0.0.0:%d, store %s", port, describe(config))
    stop.wait()
    server.stop(GRACE_SECONDS).wait()


def main(argv: list[str] | None = None) -> int:
    """Entry point: log the start line to stderr and serve.

    Args:
        argv: The arguments, ``sys.argv[1:]`` when None.

    Returns:
        0 after a graceful stop, 1 when the store cannot be created.
    """
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s", stream=sys.stderr)
    args = parse_args(argv)
    try:
        serve(args)
    except RuntimeError as error:
        log.error("%s", error)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
