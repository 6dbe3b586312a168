"""docs/architecture.md is kept current with the layers: it names every import-linter contract of
pyproject.toml and every package of src/quasar, and links only to files that exist in the repository."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"


def _doc() -> str:
    return DOC.read_text(encoding="utf-8")


def test_every_import_linter_contract_is_listed_with_its_type() -> None:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    rows = {line.split("|")[1].strip(): line for line in _doc().splitlines() if line.startswith("| ")}
    missing = [c["name"] for c in contracts if c["name"] not in rows]
    assert not missing, f"docs/architecture.md 'Import rules' does not list these contracts: {missing}"
    for contract in contracts:
        assert f"| {contract['type']} |" in rows[contract["name"]], contract["name"]


def test_every_package_and_top_level_module_is_described() -> None:
    package_dir = ROOT / "src" / "quasar"
    names = {p.name for p in package_dir.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    names |= {p.name for p in package_dir.glob("*.py") if p.name not in ("__init__.py", "__main__.py")}
    listing = _doc().split("```", 2)[1]  # the package tree
    missing = sorted(n for n in names if not re.search(rf"^  {re.escape(n)}/?\s", listing, re.MULTILINE))
    assert not missing, f"docs/architecture.md 'Packages' does not describe: {missing}"


def test_links_stay_inside_the_repository() -> None:
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", _doc()):
        assert not target.startswith(("http:", "https:", "/", "..")), target
        assert (DOC.parent / target).exists(), f"docs/architecture.md links to a missing file: {target}"
