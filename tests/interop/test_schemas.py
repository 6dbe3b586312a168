"""The schema registry with the official client against a real broker: schema versions on PRODUCER_SUCCESS and
on messages, Avro evolution read back with the writer's version, producers and consumers refused with
IncompatibleSchema under each strategy, the namespace policies, and the admin REST round trips."""

from __future__ import annotations

import json
import time

import pulsar
import pytest
from pulsar.schema import AvroSchema, Integer, JsonSchema, Record, String, StringSchema

from quasar.protocol import CommandType
from quasar.protocol.enums import ServerError
from quasar.protocol.frame import encode_command
from quasar.protocol.pb import BaseCommand, Schema
from quasar.protocol.requests import new_get_schema
from tests.interop.helpers import admin, new_client, new_namespace
from tests.interop.test_bad_input import RawConnection

pytestmark = pytest.mark.interop


def _user_v1() -> type[Record]:
    class User(Record):
        name = String(required=True)

    return User


def _user_v2_with_default() -> type[Record]:
    class User(Record):
        name = String(required=True)
        age = Integer(default=7, required=True, required_default=True)

    return User


def _user_v2_without_default() -> type[Record]:
    class User(Record):
        name = String(required=True)
        age = Integer(required=True)

    return User


def _version_text(version: int) -> str:
    """``Message.schema_version()`` of the official client: the 8 version bytes as a str."""
    return version.to_bytes(8, "big").decode("latin-1")


def _schema_path(topic: str) -> str:
    return "/admin/v2/schemas/" + topic.split("://", 1)[1]


def _definition(record: type[Record]) -> str:
    """The schema text the official client sends for ``AvroSchema(record)`` (versions are matched by bytes)."""
    return json.dumps(record.schema(), indent=True)


def _set_strategy(broker, namespace: str, strategy: str) -> None:
    status, body = admin(
        broker, "PUT", f"/admin/v2/namespaces/{namespace}/schemaCompatibilityStrategy", strategy
    )
    assert status == 204, body


def test_versions_on_producers_and_messages_and_evolution_read_with_the_writer_schema(broker):
    namespace = new_namespace(broker, "schema")
    _set_strategy(broker, namespace, "BACKWARD")
    topic = f"persistent://{namespace}/users"
    v1, v2 = _user_v1(), _user_v2_with_default()
    client = new_client(broker)
    try:
        first = client.create_producer(topic, schema=AvroSchema(v1), batching_enabled=False)
        first.send(v1(name="ann"))
        again = client.create_producer(topic, schema=AvroSchema(v1))  # identical: the same version
        second = client.create_producer(topic, schema=AvroSchema(v2), batching_enabled=False)
        second.send(v2(name="bob", age=41))
        consumer = client.subscribe(
            topic, "s", schema=AvroSchema(v2), initial_position=pulsar.InitialPosition.Earliest
        )
        messages = [consumer.receive(10_000) for _ in range(2)]
        versions = [m.schema_version() for m in messages]
        assert versions == [_version_text(0), _version_text(1)], versions
        # the v1 message is decoded with the writer's schema (fetched by version): age takes its default
        assert [(m.value().name, m.value().age) for m in messages] == [("ann", 7), ("bob", 41)]
        info = client._client.get_schema_info(topic, 0)  # the C++ client: GET_SCHEMA by version
        assert json.loads(info.schema()) == v1.schema()
        again.close()
    finally:
        client.close()
    status, body = admin(broker, "GET", _schema_path(topic) + "/schemas")
    assert status == 200
    assert [(s["version"], s["type"]) for s in body["getSchemaResponses"]] == [(0, "AVRO"), (1, "AVRO")]
    assert json.loads(body["getSchemaResponses"][1]["data"]) == v2.schema()


def test_a_field_without_default_is_refused_under_backward_and_the_producer_fails_at_once(broker):
    namespace = new_namespace(broker, "schema")
    _set_strategy(broker, namespace, "BACKWARD")
    topic = f"persistent://{namespace}/users"
    client = new_client(broker)
    try:
        client.create_producer(topic, schema=AvroSchema(_user_v1()))
        started = time.monotonic()
        with pytest.raises(pulsar.IncompatibleSchema):
            client.create_producer(topic, schema=AvroSchema(_user_v2_without_default()))
        with pytest.raises(pulsar.IncompatibleSchema):  # another type under BACKWARD
            client.create_producer(topic, schema=StringSchema())
        assert time.monotonic() - started < 10, "IncompatibleSchema is final, not retried"
        _status, body = admin(broker, "GET", _schema_path(topic) + "/schemas")
        assert len(body["getSchemaResponses"]) == 1
    finally:
        client.close()


@pytest.mark.parametrize(
    ("strategy", "accepted"),
    [
        # (v1 -> v2 with a defaulted field added, v1 -> v2 with a required field added)
        ("ALWAYS_COMPATIBLE", (True, True)),
        ("ALWAYS_INCOMPATIBLE", (False, False)),
        ("BACKWARD", (True, False)),
        ("FORWARD", (True, True)),  # old readers ignore the new field
        ("FULL", (True, False)),
        ("BACKWARD_TRANSITIVE", (True, False)),
        ("FORWARD_TRANSITIVE", (True, True)),
        ("FULL_TRANSITIVE", (True, False)),
    ],
)
def test_each_strategy_accepts_and_refuses_producers_as_pulsar(broker, strategy, accepted):
    namespace = new_namespace(broker, "strategy")
    _set_strategy(broker, namespace, strategy)
    client = new_client(broker)
    try:
        for index, (record, ok) in enumerate(
            zip((_user_v2_with_default(), _user_v2_without_default()), accepted, strict=False)
        ):
            topic = f"persistent://{namespace}/t{index}"
            client.create_producer(topic, schema=AvroSchema(_user_v1()))
            if ok:
                client.create_producer(topic, schema=AvroSchema(record))
            else:
                with pytest.raises(pulsar.IncompatibleSchema):
                    client.create_producer(topic, schema=AvroSchema(record))
    finally:
        client.close()


@pytest.mark.parametrize(
    ("strategy", "accepted"),
    [
        # consumers with (the registered v1, v2 reading v1 data via a default, v2 that cannot read v1 data)
        ("ALWAYS_COMPATIBLE", (True, True, True)),
        ("ALWAYS_INCOMPATIBLE", (False, False, False)),
        ("BACKWARD", (True, True, False)),
        ("FORWARD", (True, True, False)),  # consumers are always checked as readers (BACKWARD)
        ("FULL", (True, True, False)),
        ("BACKWARD_TRANSITIVE", (True, True, False)),
        ("FORWARD_TRANSITIVE", (True, True, False)),
        ("FULL_TRANSITIVE", (True, True, False)),
    ],
)
def test_each_strategy_accepts_and_refuses_consumers_as_pulsar(broker, strategy, accepted):
    namespace = new_namespace(broker, "consumers")
    _set_strategy(broker, namespace, strategy)
    topic = f"persistent://{namespace}/t"
    client = new_client(broker)
    try:
        client.create_producer(topic, schema=AvroSchema(_user_v1()))
        readers = (_user_v1(), _user_v2_with_default(), _user_v2_without_default())
        for index, (record, ok) in enumerate(zip(readers, accepted, strict=True)):
            if ok:
                client.subscribe(topic, f"s{index}", schema=AvroSchema(record))
            else:
                with pytest.raises(pulsar.IncompatibleSchema):
                    client.subscribe(topic, f"s{index}", schema=AvroSchema(record))
        versions = admin(broker, "GET", _schema_path(topic) + "/schemas")[1]["getSchemaResponses"]
        assert len(versions) == 1  # a consumer never adds a version to a topic that has a schema
    finally:
        client.close()


def _record(**fields: object) -> type[Record]:
    return type("Rec", (Record,), dict(fields))


def _required() -> String:
    return String(required=True)


def _defaulted() -> String:
    return String(default="d", required=True, required_default=True)


# v1 and v2 are compatible under every strategy below; v3 is compatible with v2 but not with v1
_TRANSITIVE_CASES = {
    "BACKWARD": (_record(a=_required()), _record(a=_required(), b=_defaulted()), _record(b=_required())),
    "FORWARD": (_record(a=_required()), _record(a=_defaulted()), _record(b=_defaulted())),
    "FULL": (_record(a=_required()), _record(a=_defaulted(), b=_defaulted()), _record(b=_defaulted())),
}


@pytest.mark.parametrize("strategy", sorted(_TRANSITIVE_CASES))
def test_transitive_strategies_check_every_version_not_only_the_latest(broker, strategy):
    v1, v2, v3 = _TRANSITIVE_CASES[strategy]
    client = new_client(broker)
    try:
        for name, v3_accepted in ((strategy, True), (f"{strategy}_TRANSITIVE", False)):
            namespace = new_namespace(broker, "transitive")
            _set_strategy(broker, namespace, name)
            topic = f"persistent://{namespace}/t"
            client.create_producer(topic, schema=AvroSchema(v1))
            client.create_producer(topic, schema=AvroSchema(v2))
            if v3_accepted:
                client.create_producer(topic, schema=AvroSchema(v3))
            else:
                with pytest.raises(pulsar.IncompatibleSchema):
                    client.create_producer(topic, schema=AvroSchema(v3))
            versions = admin(broker, "GET", _schema_path(topic) + "/schemas")[1]["getSchemaResponses"]
            assert len(versions) == (3 if v3_accepted else 2), name
    finally:
        client.close()


def test_consumers_are_checked_as_readers_and_register_on_an_idle_topic(broker):
    namespace = new_namespace(broker, "consumers")
    _set_strategy(broker, namespace, "FULL")
    client = new_client(broker)
    try:
        idle = f"persistent://{namespace}/idle"
        client.subscribe(idle, "s", schema=AvroSchema(_user_v1()))  # no schema yet, nothing there: registers
        status, body = admin(broker, "GET", _schema_path(idle) + "/schema")
        assert status == 200 and body["version"] == 0 and body["type"] == "AVRO"
        with pytest.raises(pulsar.IncompatibleSchema):  # cannot read v1 data: no default for age
            client.subscribe(idle, "other", schema=AvroSchema(_user_v2_without_default()))
        with pytest.raises(pulsar.IncompatibleSchema):
            client.subscribe(idle, "strings", schema=StringSchema())
        client.subscribe(idle, "reader2", schema=AvroSchema(_user_v2_with_default()))  # reads v1 data
        client.subscribe(idle, "bytes")  # no schema: never checked
        used = f"persistent://{namespace}/used"
        client.create_producer(used).send(b"raw")  # data, no schema: a consumer schema cannot be checked
        with pytest.raises(pulsar.IncompatibleSchema):
            client.subscribe(used, "s", schema=AvroSchema(_user_v1()))
    finally:
        client.close()


def test_auto_update_and_validation_enforced_policies(broker):
    namespace = new_namespace(broker, "policies")
    base = f"/admin/v2/namespaces/{namespace}"
    assert admin(broker, "GET", base + "/isAllowAutoUpdateSchema") == (200, True)
    assert admin(broker, "GET", base + "/schemaValidationEnforced") == (200, False)
    assert admin(broker, "GET", base + "/schemaCompatibilityStrategy") == (200, "FULL")
    topic = f"persistent://{namespace}/t"
    client = new_client(broker)
    try:
        client.create_producer(topic, schema=AvroSchema(_user_v1()))
        client.create_producer(topic)  # no schema: allowed while validation is not enforced
        assert admin(broker, "POST", base + "/schemaValidationEnforced", True)[0] == 204
        assert admin(broker, "POST", base + "/isAllowAutoUpdateSchema", False)[0] == 204
        with pytest.raises(pulsar.IncompatibleSchema):
            client.create_producer(topic)
        with pytest.raises(pulsar.IncompatibleSchema):  # compatible, but no new version without auto update
            client.create_producer(topic, schema=AvroSchema(_user_v2_with_default()))
        client.create_producer(topic, schema=AvroSchema(_user_v1()))  # the existing version is fine
        client.create_producer(f"persistent://{namespace}/schemaless")  # a topic without schema is fine
        assert admin(broker, "POST", base + "/isAllowAutoUpdateSchema", True)[0] == 204
        client.create_producer(topic, schema=AvroSchema(_user_v2_with_default()))
    finally:
        client.close()
    assert admin(broker, "PUT", base + "/schemaCompatibilityStrategy", "SIDEWAYS")[0] == 400


def test_json_schema_and_string_schema_round_trip(broker):
    namespace = new_namespace(broker, "json")
    topic = f"persistent://{namespace}/t"
    v1 = _user_v1()
    client = new_client(broker)
    try:
        producer = client.create_producer(topic, schema=JsonSchema(v1))
        consumer = client.subscribe(topic, "s", schema=JsonSchema(v1))
        producer.send(v1(name="json"))
        message = consumer.receive(10_000)
        assert message.value().name == "json" and message.schema_version() == _version_text(0)
        with pytest.raises(pulsar.IncompatibleSchema):
            client.create_producer(topic, schema=AvroSchema(v1))  # type change under FULL
        strings = f"persistent://{namespace}/strings"
        client.create_producer(strings, schema=StringSchema()).send("hi")
        assert admin(broker, "GET", _schema_path(strings) + "/schema")[1]["type"] == "STRING"
    finally:
        client.close()


def test_admin_upload_compatibility_test_delete_and_missing_schema(broker):
    namespace = new_namespace(broker, "rest")
    topic = f"persistent://{namespace}/t"
    path = _schema_path(topic)
    v1, v2, bad = _user_v1(), _user_v2_with_default(), _user_v2_without_default()
    assert admin(broker, "GET", path + "/schema") == (404, {"reason": "Schema not found"})
    payload = {"type": "AVRO", "schema": _definition(v1), "properties": {"owner": "ops"}}
    assert admin(broker, "POST", path + "/schema", payload) == (200, {"version": 0})
    assert admin(broker, "POST", path + "/schema", payload) == (200, {"version": 0})  # identical
    status, latest = admin(broker, "GET", path + "/schema")
    assert status == 200
    assert (latest["version"], latest["type"], latest["properties"]) == (0, "AVRO", {"owner": "ops"})
    assert json.loads(latest["data"]) == v1.schema() and latest["timestamp"] > 0
    check = {"type": "AVRO", "schema": json.dumps(bad.schema())}
    assert admin(broker, "POST", path + "/compatibility", check) == (
        200,
        {"isCompatibility": False, "schemaCompatibilityStrategy": "FULL"},
    )
    assert admin(broker, "POST", path + "/schema", check)[0] == 409
    assert admin(broker, "POST", path + "/schema", {"type": "AVRO", "schema": "{not avro"})[0] == 422
    assert admin(broker, "POST", path + "/schema", {"type": "WHATEVER", "schema": ""})[0] == 400
    good = {"type": "AVRO", "schema": _definition(v2)}
    assert admin(broker, "POST", path + "/compatibility", good)[1]["isCompatibility"] is True
    assert admin(broker, "POST", path + "/schema", good) == (200, {"version": 1})
    assert admin(broker, "GET", path + "/schema/0")[1]["version"] == 0
    assert admin(broker, "GET", path + "/schema/7")[0] == 404
    client = new_client(broker)
    try:  # the uploaded schema is what producers find
        producer = client.create_producer(topic, schema=AvroSchema(v2))
        consumer = client.subscribe(topic, "s", schema=AvroSchema(v2))
        producer.send(v2(name="x", age=1))
        assert consumer.receive(10_000).schema_version() == _version_text(1)
        producer.close()
        consumer.close()
    finally:
        client.close()
    assert admin(broker, "DELETE", path + "/schema") == (200, {"version": 2})
    assert admin(broker, "GET", path + "/schema") == (404, {"reason": "Schema is deleted"})
    assert admin(broker, "GET", path + "/schemas") == (200, {"getSchemaResponses": []})
    assert admin(broker, "GET", path + "/schema/0")[0] == 404  # versions before a deletion are gone
    assert admin(broker, "DELETE", path + "/schema")[0] == 404
    client = new_client(broker)
    try:  # after a deletion any schema may start again, with the next version number
        with pytest.raises(Exception) as missing:
            client._client.get_schema_info(topic, 0)  # the C++ client: GET_SCHEMA by version
        assert "TopicNotFound" in str(missing.value) or "not found" in str(missing.value).lower()
        client.create_producer(topic, schema=AvroSchema(bad))
        assert admin(broker, "GET", path + "/schema")[1]["version"] == 3
    finally:
        client.close()
    assert admin(broker, "DELETE", path + "/schema?force=true") == (200, {"version": None})
    assert admin(broker, "GET", path + "/schema") == (404, {"reason": "Schema not found"})
    assert admin(broker, "GET", "/admin/v2/schemas/public/nope/t/schema")[0] == 404


def test_partitions_share_the_schema_of_their_topic_and_it_survives_a_restart(broker):
    namespace = new_namespace(broker, "parts")
    topic = f"persistent://{namespace}/p"
    local = topic.split("://", 1)[1]
    assert admin(broker, "PUT", f"/admin/v2/persistent/{local}/partitions", 3)[0] == 204
    v1 = _user_v1()
    client = new_client(broker)
    try:
        producer = client.create_producer(topic, schema=AvroSchema(v1))
        for i in range(6):
            producer.send(v1(name=f"n{i}"), partition_key=str(i))
        with pytest.raises(pulsar.IncompatibleSchema):
            client.create_producer(topic + "-partition-1", schema=AvroSchema(_user_v2_without_default()))
    finally:
        client.close()
    _status, body = admin(broker, "GET", _schema_path(topic) + "/schemas")
    assert [s["version"] for s in body["getSchemaResponses"]] == [0]
    broker.restart()
    assert admin(broker, "GET", _schema_path(topic + "-partition-2") + "/schema")[1]["version"] == 0
    client = new_client(broker)
    try:
        consumer = client.subscribe(
            topic, "s", schema=AvroSchema(v1), initial_position=pulsar.InitialPosition.Earliest
        )
        names = sorted(consumer.receive(10_000).value().name for _ in range(6))
        assert names == [f"n{i}" for i in range(6)]
    finally:
        client.close()


def _get_or_create(request_id: int, topic: str, record: type[Record]) -> bytes:
    cmd = BaseCommand(type=BaseCommand.GET_OR_CREATE_SCHEMA)
    body = cmd.getOrCreateSchema
    body.request_id = request_id
    body.topic = topic
    body.schema.name = "User"
    body.schema.type = Schema.Avro
    body.schema.schema_data = _definition(record).encode()
    return encode_command(cmd)


def test_get_schema_and_get_or_create_schema_on_the_wire(broker):
    namespace = new_namespace(broker, "wire")
    topic = f"persistent://{namespace}/t"
    raw = RawConnection(broker.service_url)
    try:
        raw.send(new_get_schema(1, topic))
        missing = raw.expect(CommandType.GET_SCHEMA_RESPONSE).command.getSchemaResponse
        assert (missing.error_code, missing.error_message) == (
            ServerError.TopicNotFound,
            "Topic not found or no-schema",
        )
        raw.send(new_get_schema(2, topic, b""))
        empty = raw.expect(CommandType.GET_SCHEMA_RESPONSE).command.getSchemaResponse
        assert (empty.error_code, empty.error_message) == (
            ServerError.IncompatibleSchema,
            "Empty schema version",
        )
        raw.send(_get_or_create(3, topic, _user_v1()))  # the topic does not exist yet
        answer = raw.expect(CommandType.GET_OR_CREATE_SCHEMA_RESPONSE).command.getOrCreateSchemaResponse
        assert answer.error_code == ServerError.TopicNotFound
        assert admin(broker, "PUT", "/admin/v2/" + topic.replace("://", "/"))[0] == 204
        raw.send(_get_or_create(4, topic, _user_v1()))
        answer = raw.expect(CommandType.GET_OR_CREATE_SCHEMA_RESPONSE).command.getOrCreateSchemaResponse
        assert not answer.HasField("error_code") and answer.schema_version == (0).to_bytes(8, "big")
        raw.send(_get_or_create(5, topic, _user_v2_without_default()))
        answer = raw.expect(CommandType.GET_OR_CREATE_SCHEMA_RESPONSE).command.getOrCreateSchemaResponse
        assert answer.error_code == ServerError.IncompatibleSchema
        raw.send(new_get_schema(6, topic, (0).to_bytes(8, "big")))
        found = raw.expect(CommandType.GET_SCHEMA_RESPONSE).command.getSchemaResponse
        assert not found.HasField("error_code") and found.schema_version == (0).to_bytes(8, "big")
        assert (found.schema.type, found.schema.name) == (Schema.Avro, topic.split("://", 1)[1])
        assert json.loads(found.schema.schema_data) == _user_v1().schema()
    finally:
        raw.close()
