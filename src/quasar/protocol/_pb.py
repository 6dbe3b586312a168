"""Helpers around the generated protobuf module: type -> sub-message field, UTF-8 validation.

The upb protobuf runtime (protobuf >= 4) does not enforce two proto2 rules on parse that the C++ client
does: ``required`` fields (checked with ``IsInitialized()`` by the callers) and UTF-8 in ``string`` fields —
a proto2 string holding invalid UTF-8 comes back as ``bytes`` instead of ``str``. :func:`find_invalid_utf8`
looks only at set fields of messages whose schema contains strings, so the hot commands without strings
(SEND, MESSAGE, FLOW, PING) are not walked at all.
"""

from __future__ import annotations

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from .proto import PulsarApi_pb2 as pb

_TYPE_STRING = FieldDescriptor.TYPE_STRING
_TYPE_MESSAGE = FieldDescriptor.TYPE_MESSAGE

#: BaseCommand.Type value -> name of the BaseCommand field holding that command's sub-message.
FIELD_FOR_TYPE: dict[int, str] = {
    value.number: pb.BaseCommand.DESCRIPTOR.fields_by_number[value.number].name
    for value in pb.BaseCommand.DESCRIPTOR.enum_types_by_name["Type"].values
}


def message_type_of(field: FieldDescriptor) -> Descriptor:
    """The message type of a sub-message field.

    Raises:
        TypeError: ``field`` is not a message field (only a schema bug can cause it).
    """
    message_type = field.message_type
    if message_type is None:
        raise TypeError(f"{field.full_name} is not a message field")
    return message_type


def missing_required_fields(message: Message) -> str:
    """The comma-separated paths of the ``required`` fields missing from ``message`` (empty if none)."""
    # FindInitializationErrors exists in every protobuf runtime but not in types-protobuf's Message stub.
    return ", ".join(message.FindInitializationErrors())  # type: ignore[attr-defined]


def _all_descriptors() -> list[Descriptor]:
    found: list[Descriptor] = []
    pending = list(pb.DESCRIPTOR.message_types_by_name.values())
    while pending:
        descriptor = pending.pop()
        found.append(descriptor)
        pending.extend(descriptor.nested_types)
    return found


def _strings_by_message(descriptors: list[Descriptor]) -> dict[str, bool]:
    """Message full name -> whether it (transitively) contains a ``string`` field; a fixed point, so
    recursive messages (MessageIdData.first_chunk_message_id) are handled."""
    result = {d.full_name: any(f.type == _TYPE_STRING for f in d.fields) for d in descriptors}
    changed = True
    while changed:
        changed = False
        for d in descriptors:
            if not result[d.full_name] and any(
                f.type == _TYPE_MESSAGE and result[message_type_of(f).full_name] for f in d.fields
            ):
                result[d.full_name] = changed = True
    return result


_DESCRIPTORS = _all_descriptors()
#: Message full name -> whether it (transitively) contains a string field.
HAS_STRINGS: dict[str, bool] = _strings_by_message(_DESCRIPTORS)

# Field descriptor -> how to check it: 1 string, 2 repeated string, 3 sub-message with strings,
# 4 repeated sub-message with strings. Fields absent from the map need no check.
_STRING, _REPEATED_STRING, _MESSAGE, _REPEATED_MESSAGE = 1, 2, 3, 4
_KIND: dict[FieldDescriptor, int] = {}
for _descriptor in _DESCRIPTORS:
    for _field in _descriptor.fields:
        if _field.type == _TYPE_STRING:
            _KIND[_field] = _REPEATED_STRING if _field.is_repeated else _STRING
        elif _field.type == _TYPE_MESSAGE and HAS_STRINGS[message_type_of(_field).full_name]:
            _KIND[_field] = _REPEATED_MESSAGE if _field.is_repeated else _MESSAGE


def find_invalid_utf8(message: Message) -> str | None:
    """Return the dotted path of the first ``string`` field of ``message`` that is not valid UTF-8, or None.

    One ``ListFields()`` call (set fields only); sub-messages whose schema has no strings are skipped.
    """
    for field, value in message.ListFields():
        kind = _KIND.get(field)
        if kind is None:
            continue
        if kind == _STRING:
            if type(value) is bytes:
                return field.name
        elif kind == _REPEATED_STRING:
            for item in value:
                if type(item) is bytes:
                    return field.name
        else:
            for item in value if kind == _REPEATED_MESSAGE else (value,):
                inner = find_invalid_utf8(item)
                if inner is not None:
                    return f"{field.name}.{inner}"
    return None
