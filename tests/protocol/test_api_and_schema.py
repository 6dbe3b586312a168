"""Package-level checks: sans-IO imports, enum mirrors of the proto, schema details from the reference, the
public API, and builders rejecting bad input with LocalProtocolError."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest
from google.protobuf import descriptor_pb2

import quasar.protocol as protocol
from quasar.errors import QuasarError
from quasar.protocol import CommandType, LocalProtocolError, ServerError
from quasar.protocol import pb as pb_module
from quasar.protocol.proto import PulsarApi_pb2 as pb

PROTOCOL_DIR = pathlib.Path(protocol.__file__).parent
FORBIDDEN = {"asyncio", "socket", "selectors"}


def test_no_module_imports_asyncio_socket_or_selectors() -> None:
    offenders = []
    for path in sorted(PROTOCOL_DIR.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] in FORBIDDEN]
    assert offenders == []


def test_protocol_imports_no_other_quasar_package() -> None:
    for path in sorted(PROTOCOL_DIR.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.ImportFrom)
                and node.level == 0
                and (node.module or "").startswith("quasar")
            ):
                # the root modules every layer may use: the exception root, the twin loader and the neutral
                # receive buffer (quasar.buffers imports nothing of quasar: an import-linter contract)
                assert node.module in ("quasar.errors", "quasar.native", "quasar.buffers"), (
                    f"{path.name} imports {node.module}"
                )


def test_command_type_mirrors_base_command_type() -> None:
    enum = pb.BaseCommand.DESCRIPTOR.enum_types_by_name["Type"]
    assert {v.name: v.number for v in enum.values} == {t.name: t.value for t in CommandType}


def test_server_error_mirrors_the_proto_enum() -> None:
    assert {v.name: v.number for v in pb.DESCRIPTOR.enum_types_by_name["ServerError"].values} == {
        e.name: e.value for e in ServerError
    }
    assert ServerError.ProducerFenced == 25 and ServerError.ChecksumError == 9


def test_each_type_has_the_sub_message_with_the_same_field_number() -> None:
    fields = pb.BaseCommand.DESCRIPTOR.fields_by_number
    for command_type in CommandType:
        field = fields[command_type.value]
        assert field.message_type is not None, command_type
        assert field.message_type.name.startswith("Command"), command_type
    assert set(fields) == {1} | {t.value for t in CommandType}


@pytest.mark.parametrize(
    ("message", "required"),
    [
        (pb.MessageIdData, {"ledgerId", "entryId"}),
        (pb.KeyValue, {"key", "value"}),
        (pb.Schema, {"name", "schema_data", "type"}),
        (pb.CommandConnect, {"client_version"}),
        (pb.CommandConnected, {"server_version"}),
        (pb.CommandProducerSuccess, {"request_id", "producer_name"}),
        (pb.CommandSendError, {"producer_id", "sequence_id", "error", "message"}),
        (pb.CommandSubscribe, {"topic", "subscription", "subType", "consumer_id", "request_id"}),
        (pb.CommandMessage, {"consumer_id", "message_id"}),
        (pb.CommandAck, {"consumer_id", "ack_type"}),
        (pb.CommandFlow, {"consumer_id", "messagePermits"}),
        (pb.CommandGetLastMessageIdResponse, {"last_message_id", "request_id"}),
        (pb.MessageMetadata, {"producer_name", "sequence_id", "publish_time"}),
        (pb.SingleMessageMetadata, {"payload_size"}),
        (pb.CommandLookupTopicResponse, {"request_id"}),
        (pb.CommandPartitionedTopicMetadataResponse, {"request_id"}),
    ],
)
def test_required_fields_follow_the_reference(message: type, required: set[str]) -> None:
    empty = message()
    assert {name.split(".")[0] for name in empty.FindInitializationErrors()} == required


def test_defaults_the_client_relies_on() -> None:
    assert pb.MessageIdData().partition == -1 and pb.MessageIdData().batch_index == -1
    assert pb.CommandProducerSuccess().last_sequence_id == -1
    assert pb.CommandProducerSuccess().producer_ready is True
    assert pb.CommandSubscribe().durable is True
    assert pb.MessageMetadata().num_messages_in_batch == 1
    assert pb.CommandGetTopicsOfNamespaceResponse().changed is True


def test_public_api() -> None:
    for name in protocol.__all__:
        assert hasattr(protocol, name), name
    assert issubclass(protocol.ProtocolError, QuasarError)
    assert pb_module.BaseCommand is pb.BaseCommand
    assert pb_module.DESCRIPTOR is pb.DESCRIPTOR


@pytest.mark.parametrize(
    "call",
    [
        lambda: protocol.new_flow(-1, 10),  # uint64 consumer_id
        lambda: protocol.new_flow(0, 2**32),  # uint32 permits
        lambda: protocol.new_error(1, 99, "unknown ServerError value"),
        lambda: protocol.new_send_receipt(0, 0, -(2**63) - 1, 0),
        lambda: protocol.new_lookup_response(1, "\ud800"),  # not encodable as UTF-8
        lambda: protocol.new_connected(None, 20, None),  # type: ignore[arg-type]
        lambda: protocol.new_seek(0, 1),  # neither target
        lambda: protocol.new_seek(0, 1, message_id=(1, 2), message_publish_time=5),  # both
        lambda: protocol.new_ack(0, [(1, 2)], 0, ack_sets=[[1], [2]]),  # misaligned ack sets
        lambda: protocol.new_message(0, 1, 2, 2**31, b""),  # int32 partition
        lambda: protocol.encode_command(
            pb.BaseCommand(type=pb.BaseCommand.SEND, send={})
        ),  # missing required
        lambda: protocol.encode_headers_and_payload(pb.MessageMetadata(producer_name="p"), b""),
    ],
)
def test_builders_raise_local_protocol_error_on_bad_input(call) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(LocalProtocolError):
        call()


def test_generated_stub_is_valid_python() -> None:
    stub = PROTOCOL_DIR / "proto" / "PulsarApi_pb2.pyi"
    ast.parse(stub.read_text())


def _without_json_names(file: descriptor_pb2.FileDescriptorProto) -> descriptor_pb2.FileDescriptorProto:
    copy = descriptor_pb2.FileDescriptorProto.FromString(file.SerializeToString())
    pending = list(copy.message_type)
    while pending:
        message = pending.pop()
        for field in message.field:
            field.ClearField("json_name")
        pending.extend(message.nested_type)
    return copy


def test_generated_module_matches_the_proto(tmp_path: pathlib.Path) -> None:
    """PulsarApi_pb2.py embeds the schema PulsarApi.proto compiles to: an edit of the .proto without `make proto`
    fails here (compared as descriptors, so another protoc version's output still passes)."""
    pytest.importorskip("grpc_tools")
    proto_dir = PROTOCOL_DIR / "proto"
    descriptor_set = tmp_path / "PulsarApi.pb"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{proto_dir}",
            f"--descriptor_set_out={descriptor_set}",
            str(proto_dir / "PulsarApi.proto"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    (compiled,) = descriptor_pb2.FileDescriptorSet.FromString(descriptor_set.read_bytes()).file
    embedded = descriptor_pb2.FileDescriptorProto.FromString(pb.DESCRIPTOR.serialized_pb)
    assert _without_json_names(compiled) == _without_json_names(embedded), (
        "stale PulsarApi_pb2.py: make proto"
    )


def _stub_classes(body: list[ast.stmt], prefix: str = "") -> dict[str, set[str]]:
    """Qualified class name -> the names it assigns or annotates, for every class of a stub."""
    found: dict[str, set[str]] = {}
    for node in body:
        if isinstance(node, ast.ClassDef):
            name = prefix + node.name
            found[name] = {
                target.id
                for item in node.body
                for target in (
                    [item.target] if isinstance(item, ast.AnnAssign) else getattr(item, "targets", [])
                )
                if isinstance(target, ast.Name)
            }
            found.update(_stub_classes(node.body, name + "."))
    return found


def test_generated_stub_declares_every_message_and_field() -> None:
    classes = _stub_classes(ast.parse((PROTOCOL_DIR / "proto" / "PulsarApi_pb2.pyi").read_text()).body)
    pending = [(d, d.name) for d in pb.DESCRIPTOR.message_types_by_name.values()]
    missing = []
    while pending:
        descriptor, name = pending.pop()
        declared = classes.get(name, set())
        missing += [
            f"{name}.{f.name}" for f in descriptor.fields if f"{f.name.upper()}_FIELD_NUMBER" not in declared
        ]
        if name not in classes:
            missing.append(name)
        pending.extend((nested, f"{name}.{nested.name}") for nested in descriptor.nested_types)
    assert missing == [], "stale PulsarApi_pb2.pyi: make proto"
