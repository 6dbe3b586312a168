"""The generated protobuf and gRPC classes of RocketMQ 5's ``apache.rocketmq.v2`` API, loaded from the
``rocketmq-python-client`` wheel without importing the client.

Why not ``import rocketmq.grpc_protocol``: any ``rocketmq.*`` import runs ``rocketmq/__init__.py``, which loads
the whole client (OpenTelemetry, its thread pools) and writes logs under ``~/logs/rocketmq_python`` — a
broker must not. Why not our own copy compiled with grpcio-tools from the same ``.proto`` files: the wheel
registers them in protobuf's default pool as files ``definition.proto`` / ``service.proto``; a copy under
other file names (``apache/rocketmq/v2/*.proto``) fails to load in a process that also loads the client
(``TypeError: duplicate symbol 'apache.rocketmq.v2.TransactionResolution'``, reference rocketmq-grpc.md §11),
and the broker's tests run the official client in-process next to the read mapping.

So :func:`_load` reads the wheel's three generated files by path (``importlib``, found with ``find_spec``,
which does not execute the package) under private module names. Their own ``from rocketmq.grpc_protocol
import ...`` lines are satisfied by placeholder modules put in ``sys.modules`` only while they execute and
removed after (entries already there, the real client's, are kept and reused as they are). The files register
``definition.proto``/``service.proto`` in the default pool; when the client loads them too later, protobuf
sees identical files and both get the same message classes, so messages built here and by the client mix.

Exports: ``definition`` (``definition_pb2``: Message, Resource, Status, Code, Settings, ...), ``service``
(``service_pb2``: the requests and responses) and ``service_grpc`` (``service_pb2_grpc``: the stub and
servicer; the server registers its own generic handlers from ``SERVICE`` instead), and ``SERVICE``, the
``MessagingService`` descriptor. Raises ImportError at import when ``rocketmq-python-client`` is missing.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

__all__ = ["SERVICE", "SERVICE_NAME", "definition", "service", "service_grpc"]

_PACKAGE = "rocketmq.grpc_protocol"
_FILES = ("definition_pb2", "service_pb2", "service_pb2_grpc")


def _load() -> dict[str, types.ModuleType]:
    """The three generated modules: the client's own when it is already imported, else loaded by path."""
    loaded = {name: sys.modules.get(f"{_PACKAGE}.{name}") for name in _FILES}
    if all(module is not None for module in loaded.values()):
        return {name: module for name, module in loaded.items() if module is not None}
    spec = importlib.util.find_spec("rocketmq")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            "the RocketMQ endpoint needs rocketmq-python-client (pip install rocketmq-python-client)"
        )
    directory = Path(next(iter(spec.submodule_search_locations))) / "grpc_protocol"
    saved = {name: sys.modules.get(name) for name in ("rocketmq", _PACKAGE)}
    package = saved["rocketmq"] or types.ModuleType("rocketmq")
    protocol = saved[_PACKAGE] or types.ModuleType(_PACKAGE)
    package.grpc_protocol = protocol  # type: ignore[attr-defined]
    sys.modules["rocketmq"], sys.modules[_PACKAGE] = package, protocol
    modules: dict[str, types.ModuleType] = {}
    try:
        for name in _FILES:
            module = loaded[name]
            if module is None:
                file_spec = importlib.util.spec_from_file_location(
                    f"quasar.broker.rocketmq._generated_{name}", directory / f"{name}.py"
                )
                if file_spec is None or file_spec.loader is None:
                    raise ImportError(f"cannot load {directory / name}.py")
                module = importlib.util.module_from_spec(file_spec)
                file_spec.loader.exec_module(module)
            setattr(protocol, name, module)
            modules[name] = module
    finally:
        for name, previous in saved.items():
            if previous is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = previous
    return modules


_modules = _load()
definition: Any = _modules["definition_pb2"]
service: Any = _modules["service_pb2"]
service_grpc: Any = _modules["service_pb2_grpc"]
SERVICE_NAME = "apache.rocketmq.v2.MessagingService"
SERVICE: Any = service.DESCRIPTOR.services_by_name["MessagingService"]
"""The ``MessagingService`` descriptor: its ``methods`` (name, input/output types, streaming kinds)."""
