"""The ledger layer imports only quasar.storage, quasar.metadata (the ports) and quasar.errors (DESIGN.md import
rules); entries are opaque bytes here, so neither the protocol nor the broker may appear. The metadata
backends (memory, sqlite) are picked by composition roots, never here."""

import ast
from pathlib import Path

import quasar.ledger

ALLOWED = ("quasar.ledger", "quasar.storage", "quasar.metadata", "quasar.errors", "quasar.native")
BACKENDS = ("quasar.metadata.memory", "quasar.metadata.sqlite")


def test_ledger_imports_only_storage_metadata_and_errors():
    root = Path(quasar.ledger.__file__).parent
    offenders = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                if name.startswith("quasar") and (not name.startswith(ALLOWED) or name.startswith(BACKENDS)):
                    offenders.append(f"{path.name}: {name}")
    assert offenders == []
