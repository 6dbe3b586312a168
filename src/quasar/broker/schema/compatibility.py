"""Schema compatibility: Pulsar's strategies, checked for AVRO and JSON schemas with Avro's schema-resolution
rules (reference/security.md §4).

Pulsar's ``SchemaRegistryServiceImpl`` and ``AvroSchemaBasedCompatibilityCheck`` are followed:

- ``ALWAYS_COMPATIBLE`` accepts anything, schema type changes included.
- Otherwise every schema checked against must have the new schema's type ("Incompatible schema: exists schema
  type X, new schema type Y"); the non-transitive strategies check against the latest live version only, the
  ``*_TRANSITIVE`` ones against every live version (those after the last deletion).
- ``ALWAYS_INCOMPATIBLE`` refuses every new schema.
- ``BACKWARD``: the new schema can read data written with the old one; ``FORWARD``: the old schema can read data
  written with the new one; ``FULL``: both (Avro's ``canRead`` / ``canBeRead`` / ``mutualRead`` strategies).
- AVRO: both schemas are Avro schema JSON, checked with :func:`avro_read_errors`. JSON: when both are Avro
  schema JSON (what every Pulsar client sends today) as AVRO; an old non-Avro JSON schema may be replaced by an
  Avro one; an Avro one never by a non-Avro one; two non-Avro ones must be equal JSON
  (``JsonSchemaCompatibilityCheck``). Every other type (STRING, PROTOBUF, KEY_VALUE, ...) has no check besides
  the equal type (Pulsar's ``SchemaCompatibilityCheck.DEFAULT``).

Avro's resolution rules (:func:`avro_read_errors`, as ``org.apache.avro.SchemaCompatibility``): a writer union
is readable when each of its branches is; a reader union when one branch reads the writer's type; primitive
types must be equal or a promotion (int -> long, float, double; long -> float, double; float -> double;
string <-> bytes); records, enums and fixed must have the same unqualified name (or the reader an alias of
the writer's full name); every reader field missing from the writer needs a default (fields matched by name
or reader alias); an enum reader without a default must know every writer symbol; fixed sizes must match;
arrays and maps are resolved by their items and values. Logical types are resolved as their underlying type.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import fastavro
from fastavro.schema import SchemaParseException, UnknownType

from quasar.broker.schema.errors import IncompatibleSchemaError, InvalidSchemaDataError

__all__ = [
    "SchemaCompatibilityStrategy",
    "SchemaInfo",
    "SchemaType",
    "avro_read_errors",
    "check_compatible",
    "parse_avro",
    "validate_schema_data",
]


class SchemaType(enum.IntEnum):
    """PulsarApi.proto ``Schema.Type``; names are Pulsar's ``SchemaType`` names used by the admin REST API."""

    NONE = 0
    STRING = 1
    JSON = 2
    PROTOBUF = 3
    AVRO = 4
    BOOLEAN = 5
    INT8 = 6
    INT16 = 7
    INT32 = 8
    INT64 = 9
    FLOAT = 10
    DOUBLE = 11
    DATE = 12
    TIME = 13
    TIMESTAMP = 14
    KEY_VALUE = 15
    INSTANT = 16
    LOCAL_DATE = 17
    LOCAL_TIME = 18
    LOCAL_DATE_TIME = 19
    PROTOBUF_NATIVE = 20

    @classmethod
    def from_name(cls, name: object) -> SchemaType:
        """The type named ``name`` (Pulsar's REST spelling, case-insensitive; ``BYTES`` is NONE as on the
        wire); raises ValueError for anything else."""
        if not isinstance(name, str):
            raise ValueError(f"schema type must be a string, got {name!r}")
        key = name.upper()
        if key == "BYTES":
            return cls.NONE
        try:
            return cls[key]
        except KeyError:
            raise ValueError(f"unknown schema type {name!r}") from None


class SchemaCompatibilityStrategy(enum.Enum):
    """Pulsar's ``SchemaCompatibilityStrategy`` (``UNDEFINED``: the broker's ``schema_compatibility_strategy``)."""

    UNDEFINED = "UNDEFINED"
    ALWAYS_INCOMPATIBLE = "ALWAYS_INCOMPATIBLE"
    ALWAYS_COMPATIBLE = "ALWAYS_COMPATIBLE"
    BACKWARD = "BACKWARD"
    FORWARD = "FORWARD"
    FULL = "FULL"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"

    @property
    def transitive(self) -> bool:
        """Whether every live version is checked, not only the latest."""
        return self.name.endswith("_TRANSITIVE")

    @classmethod
    def parse(cls, value: object) -> SchemaCompatibilityStrategy:
        """The strategy named ``value`` (case-insensitive); raises ValueError for anything else."""
        if isinstance(value, str):
            try:
                return cls[value.upper()]
            except KeyError:
                pass
        raise ValueError(
            f"schema compatibility strategy must be one of {[s.name for s in cls]}, got {value!r}"
        )


@dataclass(frozen=True, slots=True)
class SchemaInfo:
    """A schema as a client or the admin API gives it: ``type``, ``data`` (for AVRO/JSON the Avro schema as
    UTF-8 JSON text; empty for most primitive types) and ``properties``."""

    type: SchemaType
    data: bytes
    properties: dict[str, str] = field(default_factory=dict)

    def same_schema(self, other: SchemaInfo) -> bool:
        """Identity as Pulsar's ``SchemaHash``: same type and same data bytes (properties are not compared)."""
        return self.type == other.type and self.data == other.data


_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_PROMOTIONS = {
    ("long", "int"),
    ("float", "int"),
    ("double", "int"),
    ("float", "long"),
    ("double", "long"),
    ("double", "float"),
    ("bytes", "string"),
    ("string", "bytes"),
}
"""(reader type, writer type) pairs Avro resolves by promotion."""


@dataclass(slots=True)
class ParsedAvro:
    """A parsed Avro schema (fastavro's canonical form: named types by full name) and its named types."""

    schema: Any
    names: dict[str, Any]


def parse_avro(data: bytes) -> ParsedAvro:
    """Parse Avro schema JSON ``data``; raises InvalidSchemaDataError when it is not UTF-8 JSON or not a valid
    Avro schema (defaults are not validated, as Pulsar's parser does not)."""
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidSchemaDataError(f"Invalid schema definition data: not JSON text: {exc}") from None
    names: dict[str, Any] = {}
    try:
        schema = fastavro.parse_schema(raw, named_schemas=names, _write_hint=False, _force=True)
    except (SchemaParseException, UnknownType, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise InvalidSchemaDataError(f"Invalid schema definition data for an Avro schema: {exc}") from None
    return ParsedAvro(schema, names)


def _is_avro(data: bytes) -> ParsedAvro | None:
    try:
        return parse_avro(data)
    except InvalidSchemaDataError:
        return None


def validate_schema_data(info: SchemaInfo) -> None:
    """Check the definition of a new schema (Pulsar ``SchemaDataValidator``): AVRO data must be an Avro schema,
    JSON data JSON text (an Avro schema, or an old-style JSON schema). Raises InvalidSchemaDataError."""
    if info.type == SchemaType.AVRO:
        parse_avro(info.data)
    elif info.type == SchemaType.JSON and _is_avro(info.data) is None:
        try:
            json.loads(info.data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise InvalidSchemaDataError(f"Invalid schema definition data for a JSON schema: {exc}") from None


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


class _Resolver:
    """Avro's reader/writer resolution over two parsed schemas (module docstring)."""

    def __init__(self, reader: ParsedAvro, writer: ParsedAvro) -> None:
        self._reader_names = reader.names
        self._writer_names = writer.names
        self._assumed: set[tuple[str, str]] = set()  # named pairs being checked: recursive types

    @staticmethod
    def _resolve(schema: Any, names: dict[str, Any]) -> Any:
        while True:
            if isinstance(schema, str):
                if schema in _PRIMITIVES:
                    return schema
                schema = names[schema]
            elif isinstance(schema, dict) and (
                schema.get("type") in _PRIMITIVES or schema.get("type") in names
            ):
                schema = schema["type"]  # a primitive with a logical type, or a wrapped reference
            else:
                return schema

    @staticmethod
    def _kind(schema: Any) -> str:
        if isinstance(schema, str):
            return schema
        if isinstance(schema, list):
            return "union"
        kind = schema["type"]
        return "record" if kind == "error" else kind

    def errors(self, reader: Any, writer: Any, path: str) -> list[str]:
        """Why data written with ``writer`` cannot be read with ``reader`` (empty: it can)."""
        reader = self._resolve(reader, self._reader_names)
        writer = self._resolve(writer, self._writer_names)
        if isinstance(writer, list):
            return [e for branch in writer for e in self.errors(reader, branch, path)]
        if isinstance(reader, list):
            if any(not self.errors(branch, writer, path) for branch in reader):
                return []
            return [f"{path}: no branch of the reader's union reads the writer's {self._kind(writer)}"]
        r_kind, w_kind = self._kind(reader), self._kind(writer)
        if r_kind != w_kind:
            if (r_kind, w_kind) in _PROMOTIONS:
                return []
            return [f"{path}: reader type {r_kind} cannot read writer type {w_kind}"]
        if r_kind in _PRIMITIVES:
            return []
        if r_kind == "array":
            return self.errors(reader["items"], writer["items"], f"{path}[]")
        if r_kind == "map":
            return self.errors(reader["values"], writer["values"], f"{path}{{}}")
        r_name, w_name = reader["name"], writer["name"]
        if _short(r_name) != _short(w_name) and w_name not in reader.get("aliases", ()):
            return [f"{path}: reader {r_kind} {r_name} does not match writer {w_kind} {w_name}"]
        if r_kind == "fixed":
            if reader["size"] != writer["size"]:
                return [f"{path}: fixed {r_name} has size {reader['size']}, the writer's {writer['size']}"]
            return []
        if r_kind == "enum":
            missing = [s for s in writer["symbols"] if s not in reader["symbols"]]
            if missing and "default" not in reader:
                return [f"{path}: reader enum {r_name} lacks the writer's symbols {missing}"]
            return []
        return self._record_errors(reader, writer, path)

    def _record_errors(self, reader: dict[str, Any], writer: dict[str, Any], path: str) -> list[str]:
        pair = (reader["name"], writer["name"])
        if pair in self._assumed:  # a recursive reference: compatible unless another path says otherwise
            return []
        self._assumed.add(pair)
        written = {f["name"]: f for f in writer["fields"]}
        problems: list[str] = []
        for reader_field in reader["fields"]:
            name = reader_field["name"]
            candidates = [name, *reader_field.get("aliases", ())]
            writer_field = next((written[n] for n in candidates if n in written), None)
            where = f"{path}.{name}" if path else name
            if writer_field is None:
                if "default" not in reader_field:
                    problems.append(f"{where}: reader field has no default and the writer does not write it")
            else:
                problems += self.errors(reader_field["type"], writer_field["type"], where)
        return problems


def avro_read_errors(reader: ParsedAvro, writer: ParsedAvro) -> list[str]:
    """Why data written with ``writer`` cannot be read with ``reader`` under Avro's resolution rules (module
    docstring); empty when it can."""
    return _Resolver(reader, writer).errors(reader.schema, writer.schema, "")


def _avro_check(existing: ParsedAvro, new: ParsedAvro, strategy: SchemaCompatibilityStrategy) -> list[str]:
    name = strategy.name.removesuffix("_TRANSITIVE")
    problems: list[str] = []
    if name in ("BACKWARD", "FULL"):
        problems += avro_read_errors(new, existing)
    if name in ("FORWARD", "FULL"):
        problems += avro_read_errors(existing, new)
    return problems


def _json_check(existing: SchemaInfo, new: SchemaInfo, strategy: SchemaCompatibilityStrategy) -> list[str]:
    old_avro, new_avro = _is_avro(existing.data), _is_avro(new.data)
    if old_avro is not None:
        if new_avro is None:
            return ["Schema not compatible with avro schema"]
        return _avro_check(old_avro, new_avro, strategy)
    if new_avro is not None:  # an old-style JSON schema may be upgraded to an Avro-based one
        return []
    try:
        same = json.loads(existing.data) == json.loads(new.data)
    except (UnicodeDecodeError, ValueError):
        same = existing.data == new.data
    return [] if same else ["the JSON schemas differ"]


def check_compatible(
    existing: Sequence[SchemaInfo], new: SchemaInfo, strategy: SchemaCompatibilityStrategy
) -> None:
    """Check ``new`` against the live versions ``existing`` (oldest first) under ``strategy`` (never UNDEFINED:
    resolve it first). Raises IncompatibleSchemaError with Pulsar's reason, InvalidSchemaDataError when
    ``new`` is not a valid definition of its type. Nothing to check against: compatible."""
    if strategy == SchemaCompatibilityStrategy.UNDEFINED:
        raise ValueError("resolve UNDEFINED to the broker's strategy before checking")
    if strategy == SchemaCompatibilityStrategy.ALWAYS_COMPATIBLE or not existing:
        return
    targets = list(existing) if strategy.transitive else [existing[-1]]
    for old in reversed(targets):
        if old.type != new.type:
            raise IncompatibleSchemaError(
                f"Incompatible schema: exists schema type {old.type.name}, new schema type {new.type.name}"
            )
    if strategy == SchemaCompatibilityStrategy.ALWAYS_INCOMPATIBLE:
        raise IncompatibleSchemaError("Schema compatibility strategy is ALWAYS_INCOMPATIBLE")
    if new.type not in (SchemaType.AVRO, SchemaType.JSON):
        return
    validate_schema_data(new)
    for old in reversed(targets):  # newest first, as Pulsar's validator reports
        if new.type == SchemaType.AVRO:
            old_avro = _is_avro(old.data)
            problems = (
                ["the existing schema is not a valid Avro schema"]
                if old_avro is None
                else _avro_check(old_avro, parse_avro(new.data), strategy)
            )
        else:
            problems = _json_check(old, new, strategy)
        if problems:
            raise IncompatibleSchemaError(
                f"Incompatible schema used ({strategy.name}): " + "; ".join(problems[:5])
            )
