"""Bounds on the free-form strings of PRODUCER and SUBSCRIBE, checked before the broker works on them.

Pulsar leaves producer, subscription and consumer names and the metadata / subscription properties of these
commands unbounded; only the frame size (``max_message_size``) limits them. The broker hashes consumer names
into rings, stores subscription names and properties in the metadata store and copies names into stats, so
one command carrying a megabyte name could stall the event loop. The limits (BrokerConfig's hardening
block):

=============================  =======  ==========================================================
setting                        default  bounds
=============================  =======  ==========================================================
``max_name_length``            1024     UTF-8 bytes of ``producer_name``, ``subscription``,
                                        ``consumer_name``
``max_property_length``        8192     UTF-8 bytes of each key and each value of ``metadata`` and
                                        ``subscription_properties``
``max_properties_per_command`` 256      entries of each of those lists
=============================  =======  ==========================================================

A command past a limit is answered with ``NotAllowedError`` naming the field and the limit; the connection
stays open. The cost of a check is bounded by the limit, not by the string: a name longer in characters
than the byte limit is refused without being encoded.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from quasar.broker.errors import NotAllowedError

if TYPE_CHECKING:
    from quasar.protocol.pb import CommandProducer, CommandSubscribe

__all__ = ["StringLimits", "check_producer_strings", "check_subscribe_strings"]


class StringLimits(Protocol):
    """The settings read here (BrokerConfig has them)."""

    @property
    def max_name_length(self) -> int: ...

    @property
    def max_property_length(self) -> int: ...

    @property
    def max_properties_per_command(self) -> int: ...


class _KeyValue(Protocol):
    key: str
    value: str


def _utf8_length_over(text: str, limit: int) -> int | None:
    """The UTF-8 length of ``text`` when it is above ``limit`` (a lower bound for very long text), else None."""
    if len(text) > limit:  # each character is at least one byte: no need to encode it
        return len(text)
    size = len(text.encode("utf-8", "surrogatepass"))
    return size if size > limit else None


def _check_name(what: str, text: str, limit: int) -> None:
    size = _utf8_length_over(text, limit)
    if size is not None:
        raise NotAllowedError(f"{what} of {size}+ bytes is longer than max_name_length {limit}")


def _check_properties(what: str, entries: Iterable[_KeyValue], count: int, limits: StringLimits) -> None:
    if count > limits.max_properties_per_command:
        raise NotAllowedError(
            f"{count} {what} entries are more than max_properties_per_command {limits.max_properties_per_command}"
        )
    limit = limits.max_property_length
    for entry in entries:
        for part, text in (("key", entry.key), ("value", entry.value)):
            size = _utf8_length_over(text, limit)
            if size is not None:
                raise NotAllowedError(
                    f"a {what} {part} of {size}+ bytes is longer than max_property_length {limit}"
                )


def check_producer_strings(cmd: CommandProducer, limits: StringLimits) -> None:
    """Raise ``NotAllowedError`` when CommandProducer's ``producer_name`` or ``metadata`` is past a limit."""
    _check_name("producer_name", cmd.producer_name, limits.max_name_length)
    _check_properties("metadata", cmd.metadata, len(cmd.metadata), limits)


def check_subscribe_strings(cmd: CommandSubscribe, limits: StringLimits) -> None:
    """Raise ``NotAllowedError`` when CommandSubscribe's ``subscription``, ``consumer_name``, ``metadata`` or
    ``subscription_properties`` is past a limit."""
    _check_name("subscription", cmd.subscription, limits.max_name_length)
    _check_name("consumer_name", cmd.consumer_name, limits.max_name_length)
    _check_properties("metadata", cmd.metadata, len(cmd.metadata), limits)
    _check_properties(
        "subscription_properties", cmd.subscription_properties, len(cmd.subscription_properties), limits
    )
