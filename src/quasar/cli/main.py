"""The ``quasar`` command: ``quasar standalone``, ``quasar demo ...``."""

from __future__ import annotations

import click

from quasar import __version__


@click.group()
@click.version_option(__version__, prog_name="quasar")
def main() -> None:
    """Quasar: a Pulsar-compatible persistent message broker."""


def _register() -> None:
    from quasar.cli.admin import admin
    from quasar.cli.broker import broker
    from quasar.cli.cluster import cluster
    from quasar.cli.demo import demo
    from quasar.cli.nameserver import nameserver
    from quasar.cli.perf import perf
    from quasar.cli.query import query
    from quasar.cli.standalone import standalone
    from quasar.cli.tokens import tokens

    main.add_command(standalone)
    main.add_command(broker)
    main.add_command(demo)
    main.add_command(query)
    main.add_command(nameserver)
    main.add_command(cluster)
    main.add_command(admin)
    main.add_command(tokens)
    main.add_command(perf)


_register()


if __name__ == "__main__":
    main(prog_name="quasar")
