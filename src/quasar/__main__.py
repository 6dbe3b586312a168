"""``python -m quasar`` runs the ``quasar`` command."""

from quasar.cli.main import main

if __name__ == "__main__":
    main(prog_name="quasar")
