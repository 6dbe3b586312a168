"""``quasar admin schemas`` (``pulsar-admin schemas``): ``get T [--version V] [--all-version]``,
``upload T -f schema.json`` (Pulsar's PostSchemaPayload file ``{"type": "AVRO", "schema": "...",
"properties": {}}``), ``delete T [-f]``. Schemas belong to the partitioned topic, not to its partitions."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

import click

from quasar.cli.admin.args import topic_name
from quasar.cli.admin.context import admin_client
from quasar.cli.admin.output import echo_json

__all__ = ["schemas"]


def _url(topic: str, suffix: str) -> str:
    name = topic_name(topic)
    local = name.partitioned_topic_name.rsplit("/", 1)[1]
    return (
        "/admin/v2/schemas/"
        + "/".join(quote(p, safe="") for p in (name.tenant, name.namespace, local))
        + suffix
    )


@click.group()
def schemas() -> None:
    """Topic schemas (/admin/v2/schemas)."""


@schemas.command("get")
@click.argument("topic")
@click.option(
    "--version", "-v", type=click.IntRange(min=0), default=None, help="That version (default: latest)."
)
@click.option("--all-version", "-a", is_flag=True, help="Every live version.")
def get_schema(topic: str, version: int | None, all_version: bool) -> None:
    """TOPIC's schema (type, version, definition)."""
    if all_version:
        echo_json(admin_client().get_json(_url(topic, "/schemas")))
    else:
        suffix = "/schema" if version is None else f"/schema/{version}"
        echo_json(admin_client().get_json(_url(topic, suffix)))


@schemas.command("upload")
@click.argument("topic")
@click.option("--filename", "-f", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="JSON file: {type, schema, properties}.")  # fmt: skip
def upload(topic: str, filename: Path) -> None:
    """Add the schema in FILENAME to TOPIC (409 when incompatible with the namespace's strategy)."""
    try:
        payload = json.loads(filename.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise click.BadParameter(
            f"{filename}: not a JSON schema payload: {exc}", param_hint="--filename"
        ) from None
    answer = admin_client().send("POST", _url(topic, "/schema"), payload)
    click.echo(f"schema version {answer.get('version') if isinstance(answer, dict) else answer}")


@schemas.command("delete")
@click.argument("topic")
@click.option("--force", "-f", is_flag=True, help="Remove every version instead of marking it deleted.")
def delete(topic: str, force: bool) -> None:
    """Delete TOPIC's schema."""
    admin_client().send("DELETE", _url(topic, "/schema"), force=str(force).lower())
