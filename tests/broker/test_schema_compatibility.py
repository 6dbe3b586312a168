"""The compatibility checker: Pulsar's strategies over Avro's resolution rules, with hypothesis properties checked
against fastavro's own schema resolution (reading data written with one schema through another)."""

from __future__ import annotations

import io
import itertools
import json
from typing import Any

import fastavro
import pytest
from fastavro.read import SchemaResolutionError
from fastavro.utils import generate_one
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quasar.broker.schema import IncompatibleSchemaError, InvalidSchemaDataError, SchemaCompatibilityStrategy
from quasar.broker.schema.compatibility import (
    SchemaInfo,
    SchemaType,
    avro_read_errors,
    check_compatible,
    parse_avro,
)

S = SchemaCompatibilityStrategy
PRIMITIVES = ["null", "boolean", "int", "long", "float", "double", "bytes", "string"]
DEFAULTS = {
    "null": None,
    "boolean": False,
    "int": 0,
    "long": 0,
    "float": 0.0,
    "double": 0.0,
    "bytes": "",
    "string": "",
}
_names = itertools.count()


def avro(schema: Any) -> SchemaInfo:
    return SchemaInfo(SchemaType.AVRO, json.dumps(schema).encode())


def record(fields: list[dict[str, Any]], name: str = "R") -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": fields}


def readable(reader: Any, writer: Any) -> bool:
    return not avro_read_errors(
        parse_avro(json.dumps(reader).encode()), parse_avro(json.dumps(writer).encode())
    )


# ---------------------------------------------------------------------- Avro resolution, example by example
@pytest.mark.parametrize(
    ("reader", "writer", "ok"),
    [
        ("long", "int", True),
        ("double", "int", True),
        ("float", "long", True),
        ("int", "long", False),
        ("string", "bytes", True),
        ("bytes", "string", True),
        ("string", "int", False),
        (["null", "string"], "string", True),
        ("string", ["null", "string"], False),  # the writer's null branch cannot be read
        (["null", "long"], ["null", "int"], True),
        ({"type": "array", "items": "long"}, {"type": "array", "items": "int"}, True),
        ({"type": "map", "values": "int"}, {"type": "map", "values": "string"}, False),
        ({"type": "fixed", "name": "F", "size": 4}, {"type": "fixed", "name": "F", "size": 8}, False),
        ({"type": "fixed", "name": "F", "size": 4}, {"type": "fixed", "name": "G", "size": 4}, False),
        (
            {"type": "enum", "name": "E", "symbols": ["A"]},
            {"type": "enum", "name": "E", "symbols": ["A", "B"]},
            False,
        ),
        (
            {"type": "enum", "name": "E", "symbols": ["A"], "default": "A"},
            {"type": "enum", "name": "E", "symbols": ["A", "B"]},
            True,
        ),
        ({"type": "int", "logicalType": "date"}, "int", True),
        (record([{"name": "a", "type": "int"}]), record([{"name": "a", "type": "int"}], "Other"), False),
        (
            record([{"name": "a", "type": "int"}], "ns.R"),
            record([{"name": "a", "type": "int"}], "other.R"),
            True,
        ),
        (
            record([{"name": "b", "type": "int", "aliases": ["a"]}]),
            record([{"name": "a", "type": "int"}]),
            True,
        ),
    ],
)
def test_avro_resolution_rules(reader, writer, ok):
    wrap_r, wrap_w = (
        record([{"name": "x", "type": reader}], "W"),
        record([{"name": "x", "type": writer}], "W"),
    )
    assert readable(wrap_r, wrap_w) is ok


def test_recursive_schemas_resolve():
    node = record([{"name": "v", "type": "int"}, {"name": "next", "type": ["null", "R"]}])
    wider = record([{"name": "v", "type": "long"}, {"name": "next", "type": ["null", "R"]}])
    assert readable(wider, node) and not readable(node, wider)


# ---------------------------------------------------------------------- strategies
V1 = avro(record([{"name": "a", "type": "string"}]))
V2_DEFAULT = avro(record([{"name": "a", "type": "string"}, {"name": "b", "type": "int", "default": 1}]))
V2_REQUIRED = avro(record([{"name": "a", "type": "string"}, {"name": "b", "type": "int"}]))
V2_DROPPED = avro(record([{"name": "b", "type": "int", "default": 1}]))


@pytest.mark.parametrize(
    ("strategy", "new", "ok"),
    [
        (S.BACKWARD, V2_DEFAULT, True),
        (S.BACKWARD, V2_REQUIRED, False),
        (S.BACKWARD, V2_DROPPED, True),  # the new reader ignores a
        (S.FORWARD, V2_REQUIRED, True),  # old readers ignore b
        (S.FORWARD, V2_DROPPED, False),  # old readers need a, which has no default
        (S.FULL, V2_DEFAULT, True),
        (S.FULL, V2_REQUIRED, False),
        (S.FULL, V2_DROPPED, False),
        (S.ALWAYS_COMPATIBLE, V2_DROPPED, True),
        (S.ALWAYS_INCOMPATIBLE, V2_DEFAULT, False),
    ],
)
def test_strategies_against_the_latest_version(strategy, new, ok):
    if ok:
        check_compatible([V1], new, strategy)
    else:
        with pytest.raises(IncompatibleSchemaError):
            check_compatible([V1], new, strategy)


def test_transitive_strategies_check_every_version():
    v1 = avro(record([{"name": "a", "type": "string"}]))
    v2 = avro(record([{"name": "a", "type": "string"}, {"name": "b", "type": "int", "default": 0}]))
    v3 = avro(record([{"name": "b", "type": "int"}]))  # reads v2 data, not v1 data
    check_compatible([v1, v2], v3, S.BACKWARD)
    with pytest.raises(IncompatibleSchemaError, match="BACKWARD_TRANSITIVE"):
        check_compatible([v1, v2], v3, S.BACKWARD_TRANSITIVE)


def test_type_changes_and_other_types():
    string = SchemaInfo(SchemaType.STRING, b"")
    with pytest.raises(IncompatibleSchemaError, match="exists schema type AVRO, new schema type STRING"):
        check_compatible([V1], string, S.BACKWARD)
    check_compatible([V1], string, S.ALWAYS_COMPATIBLE)
    check_compatible(
        [string], SchemaInfo(SchemaType.STRING, b"anything"), S.FULL
    )  # no check besides the type
    proto = SchemaInfo(SchemaType.PROTOBUF, b"{}")
    check_compatible([proto], SchemaInfo(SchemaType.PROTOBUF, b'{"other": 1}'), S.FULL)
    with pytest.raises(IncompatibleSchemaError, match="ALWAYS_INCOMPATIBLE"):
        check_compatible([string], string, S.ALWAYS_INCOMPATIBLE)
    check_compatible([], V2_REQUIRED, S.ALWAYS_INCOMPATIBLE)  # nothing to check against


def test_json_schemas():
    json_v1 = SchemaInfo(SchemaType.JSON, V1.data)
    check_compatible([json_v1], SchemaInfo(SchemaType.JSON, V2_DEFAULT.data), S.FULL)
    with pytest.raises(IncompatibleSchemaError):
        check_compatible([json_v1], SchemaInfo(SchemaType.JSON, V2_REQUIRED.data), S.FULL)
    legacy = SchemaInfo(SchemaType.JSON, b'{"type": "object", "properties": {"a": {"type": "string"}}}')
    check_compatible([legacy], json_v1, S.FULL)  # an old-style JSON schema may become an Avro one
    with pytest.raises(IncompatibleSchemaError, match="avro"):
        check_compatible([json_v1], legacy, S.FULL)
    with pytest.raises(IncompatibleSchemaError):
        check_compatible([legacy], SchemaInfo(SchemaType.JSON, b'{"type": "object"}'), S.FULL)


def test_invalid_definitions_are_refused():
    for data in (b"{not json", b'{"type": "record", "fields": []}', b'"nosuchtype"', b"\xff"):
        with pytest.raises(InvalidSchemaDataError):
            check_compatible([V1], SchemaInfo(SchemaType.AVRO, data), S.FULL)


def test_strategy_and_type_names():
    assert S.parse("full_transitive") is S.FULL_TRANSITIVE and S.FULL_TRANSITIVE.transitive
    assert (
        SchemaType.from_name("avro") is SchemaType.AVRO and SchemaType.from_name("BYTES") is SchemaType.NONE
    )
    for bad in ("SIDEWAYS", 3, None):
        with pytest.raises(ValueError):
            S.parse(bad)
    with pytest.raises(ValueError):
        SchemaType.from_name("MAYBE")
    with pytest.raises(ValueError):
        check_compatible([V1], V1, S.UNDEFINED)


# ---------------------------------------------------------------------- properties (hypothesis)
GENERATED = [p for p in PRIMITIVES if p != "bytes"]
"""Types of generated schemas: random bytes read through Avro's bytes -> string promotion are not UTF-8 (a
data error, not a schema one), so ``bytes`` is left to the examples above."""


def _leaf() -> st.SearchStrategy[Any]:
    return st.sampled_from(GENERATED)


def _type(depth: int) -> st.SearchStrategy[Any]:
    if depth == 0:
        return _leaf()
    inner = _type(depth - 1)
    return st.one_of(
        _leaf(),
        st.builds(lambda t: {"type": "array", "items": t}, inner),
        st.builds(lambda t: {"type": "map", "values": t}, inner),
        st.lists(st.sampled_from(GENERATED), min_size=1, max_size=3, unique=True),
        st.builds(lambda fs: record(fs, f"N{next(_names)}"), _fields(depth - 1)),
    )


def _fields(depth: int) -> st.SearchStrategy[list[dict[str, Any]]]:
    return st.lists(_type(depth), min_size=1, max_size=4).map(
        lambda types: [{"name": f"f{i}", "type": t} for i, t in enumerate(types)]
    )


RECORDS = _fields(2).map(lambda fs: record(fs, "Top"))


def _roundtrip(datum: Any, writer: Any, reader: Any) -> Any:
    buffer = io.BytesIO()
    parsed_writer = fastavro.parse_schema(writer)
    fastavro.schemaless_writer(buffer, parsed_writer, datum)
    buffer.seek(0)
    return fastavro.schemaless_reader(buffer, parsed_writer, fastavro.parse_schema(reader))


FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(RECORDS)
def test_a_schema_is_always_full_compatible_with_itself(schema):
    info = avro(schema)
    for strategy in (S.FULL, S.FULL_TRANSITIVE, S.BACKWARD, S.FORWARD):
        check_compatible([info], info, strategy)


@FAST
@given(RECORDS, st.sampled_from(PRIMITIVES))
def test_adding_a_field_with_default_is_always_backward_compatible(schema, kind):
    new = record([*schema["fields"], {"name": "added", "type": kind, "default": DEFAULTS[kind]}], "Top")
    check_compatible([avro(schema)], avro(new), S.BACKWARD)
    datum = generate_one(fastavro.parse_schema(schema))
    assert _roundtrip(datum, schema, new)["added"] == DEFAULTS[kind]  # Avro fills in the default


@FAST
@given(RECORDS, st.data())
def test_removing_a_field_without_default_is_never_forward_compatible(schema, data):
    index = data.draw(st.integers(0, len(schema["fields"]) - 1))
    new = record(
        [f for i, f in enumerate(schema["fields"]) if i != index] or [{"name": "z", "type": "int"}], "Top"
    )
    with pytest.raises(IncompatibleSchemaError):
        check_compatible([avro(schema)], avro(new), S.FORWARD)
    datum = generate_one(fastavro.parse_schema(new))
    with pytest.raises(
        SchemaResolutionError
    ):  # and Avro itself cannot read it: the old reader's field is missing
        _roundtrip(datum, new, schema)


_WIDER = {"int": "long", "long": "double", "float": "double"}


def _widen(schema: Any) -> Any:
    """``schema`` with Avro's promotions applied everywhere (int -> long -> double, float -> double) and plain
    types made nullable: a reader that reads everything ``schema`` writes."""
    if isinstance(schema, str):
        wider = _WIDER.get(schema, schema)
        return wider if wider == "null" else ["null", wider]
    if isinstance(schema, list):
        return sorted({_WIDER.get(branch, branch) for branch in schema} | set(schema), key=PRIMITIVES.index)
    if schema["type"] == "array":
        return {"type": "array", "items": _widen(schema["items"])}
    if schema["type"] == "map":
        return {"type": "map", "values": _widen(schema["values"])}
    return {**schema, "fields": [{**f, "type": _widen(f["type"])} for f in schema["fields"]]}


@FAST
@given(RECORDS)
def test_promoted_readers_read_and_narrowed_writers_are_refused(schema):
    wider = _widen(schema)
    assert readable(wider, schema)
    _roundtrip(generate_one(fastavro.parse_schema(schema)), schema, wider)
    if wider != schema and json.dumps(wider) != json.dumps(schema):
        check_compatible([avro(schema)], avro(wider), S.BACKWARD)


@FAST
@given(RECORDS, RECORDS)
def test_whatever_the_checker_accepts_avro_reads(writer, reader):
    """Oracle: when the checker says ``reader`` reads ``writer`` data, fastavro's resolution reads generated
    data; when a reader field without default is missing from the writer, both refuse."""
    if readable(reader, writer):
        _roundtrip(generate_one(fastavro.parse_schema(writer)), writer, reader)
    shorter = record(writer["fields"][:-1] or [{"name": "other", "type": "int"}], "Top")
    if len(reader["fields"]) >= len(writer["fields"]):  # the reader has f<last>, without default
        assert not readable(reader, shorter)
        with pytest.raises(SchemaResolutionError):
            _roundtrip(generate_one(fastavro.parse_schema(shorter)), shorter, reader)
