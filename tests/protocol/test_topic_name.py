"""TopicName parsing follows the C++ client's short forms and Pulsar's naming rules."""

from __future__ import annotations

import pytest

from quasar.protocol import InvalidTopicNameError, TopicName
from quasar.protocol.topic_name import MAX_NAMED_ENTITY_LENGTH, MAX_TOPIC_NAME_LENGTH, check_named_entity


@pytest.mark.parametrize(
    ("name", "full_name"),
    [
        ("t", "persistent://public/default/t"),
        ("tenant/ns/t", "persistent://tenant/ns/t"),
        ("persistent://tenant/ns/t", "persistent://tenant/ns/t"),
        ("non-persistent://tenant/ns/t", "non-persistent://tenant/ns/t"),
        (
            "persistent://my-tenant/ns.v1/with spaces & symbols!",
            "persistent://my-tenant/ns.v1/with spaces & symbols!",
        ),
    ],
)
def test_full_and_short_forms(name: str, full_name: str) -> None:
    topic = TopicName.parse(name)
    assert topic.full_name == full_name == str(topic)
    assert TopicName.parse(topic.full_name) == topic


def test_fields_of_a_plain_topic() -> None:
    topic = TopicName.parse("non-persistent://acme/orders/eu")
    assert (topic.domain, topic.tenant, topic.namespace, topic.local_name) == (
        "non-persistent",
        "acme",
        "orders",
        "eu",
    )
    assert topic.namespace_name == "acme/orders"
    assert not topic.is_persistent
    assert topic.partition_index == -1 and not topic.is_partition
    assert topic.partitioned_topic_name == "non-persistent://acme/orders/eu"


def test_partition_topic() -> None:
    topic = TopicName.parse("persistent://public/default/my-topic-partition-12")
    assert topic.partition_index == 12 and topic.is_partition
    assert topic.partitioned_topic_name == "persistent://public/default/my-topic"
    assert topic.is_persistent


def test_partition_builds_partition_names_of_the_base_topic() -> None:
    base = TopicName.parse("t")
    first = base.partition(0)
    assert first.full_name == "persistent://public/default/t-partition-0"
    assert first == TopicName.parse(first.full_name)
    assert first.partition(3).full_name == "persistent://public/default/t-partition-3"
    with pytest.raises(InvalidTopicNameError):
        base.partition(-1)


@pytest.mark.parametrize(
    "name",
    [
        "",
        "a/b",  # two parts
        "a/b/c/d",  # short form with four parts
        "persistent://tenant/cluster/ns/t",  # legacy V1 name
        "persistent://tenant/ns",
        "persistent://tenant/ns/",
        "persistent:///ns/t",
        "persistent://tenant//t",
        "http://tenant/ns/t",
        "://tenant/ns/t",
        "persistent://ten ant/ns/t",  # space in tenant
        "persistent://tenant/n$s/t",
        "persistent://tenant/ns/t\x00",
        "persistent://tenant/ns/t\n",
        "t-partition-",
        "t-partition-x",
        "t-partition--1",
        "t-partition-01",
        "t-partition-99999999999",
        "-partition-1",
        # hostile names (issue 16): relative paths, escapes that decode to them, invisible characters
        "persistent://../../x",
        "persistent://public/../x",
        "persistent://./default/x",
        "persistent://public/default/..",
        "persistent://public/default/.",
        "..",
        "%2e%2e",
        "%2E%2E",
        "%2e%2e%2f",
        "a%2Fb",
        "a%5Cb",
        "a%00b",
        "a\u202eb",  # right-to-left override
        "a\u2066b",  # left-to-right isolate
        "a\u200fb",  # right-to-left mark
        "a\x85b",  # C1 control (NEL)
        "a\x7fb",
        "x" * 10_000,
        "persistent://public/default/" + "y" * 20_000,
        "persistent://" + "t" * 256 + "/ns/x",
    ],
)
def test_invalid_names_raise(name: str) -> None:
    with pytest.raises(InvalidTopicNameError):
        TopicName.parse(name)


def test_non_string_raises() -> None:
    with pytest.raises(InvalidTopicNameError):
        TopicName.parse(b"t")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "name", ["a..b", "50%", "a%20b", "caf\u00e9", "x" * (1024 - len("persistent://public/default/"))]
)
def test_unusual_but_valid_names_parse(name: str) -> None:
    assert TopicName.parse(name).local_name == name


def test_name_at_the_length_bound_counts_utf8_bytes() -> None:
    prefix = "persistent://public/default/"
    assert TopicName.parse(prefix + "x" * (MAX_TOPIC_NAME_LENGTH - len(prefix))).local_name
    with pytest.raises(InvalidTopicNameError, match="UTF-8"):
        TopicName.parse(prefix + "\u00e9" * ((MAX_TOPIC_NAME_LENGTH - len(prefix)) // 2 + 1))


@pytest.mark.parametrize("value", ["", ".", "..", "a/b", "a b", "%2e", "x" * (MAX_NAMED_ENTITY_LENGTH + 1)])
def test_check_named_entity_refuses(value: str) -> None:
    with pytest.raises(InvalidTopicNameError, match="tenant name is not valid"):
        check_named_entity("tenant", value)


def test_check_named_entity_accepts_pulsar_names() -> None:
    for value in ("public", "my-tenant_1", "a=b:c.d", "...", "x" * MAX_NAMED_ENTITY_LENGTH):
        check_named_entity("namespace", value)
