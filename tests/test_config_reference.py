"""docs/configuration.md is generated from BrokerConfig and the commands' options by
scripts/gen_config_reference.py: the checked-in file must be what the script writes from today's code."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from quasar.broker.config import BrokerConfig

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "gen_config_reference.py"


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_config_reference", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_config_reference"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def rendered(gen: ModuleType) -> str:
    return gen.render()


def test_checked_in_reference_is_what_the_script_generates_now(gen: ModuleType, rendered: str) -> None:
    checked_in = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert checked_in == rendered, (
        "docs/configuration.md is stale (BrokerConfig or a command's options changed); regenerate it with:"
        f" {gen.REGENERATE}"
    )


def _cells(row: str) -> list[str]:
    """The cells of a Markdown table row (``\\|`` inside a cell is not a separator)."""
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", row)[1:-1]]


def test_every_field_has_a_row_with_its_type_default_and_a_description(rendered: str) -> None:
    rows = {_cells(line)[0]: line for line in rendered.splitlines() if line.startswith("| `")}
    for field in dataclasses.fields(BrokerConfig):
        row = rows.get(f"`{field.name}`")
        assert row is not None, f"no row for {field.name}"
        cells = _cells(row)
        assert cells[1].strip("`") == str(field.type).replace("|", "\\|"), field.name
        assert cells[4] and cells[4] != "(undocumented)", f"{field.name} has no documentation in config.py"
    assert _cells(rows["`data_dir`"])[3] == "`--data-dir`"
    assert "`--cluster` (broker); `quasar broker` default `quasar-cluster`" in rows["`cluster_name`"]
    assert "`6650`" in rows["`port`"] and "`\"SYNC_FLUSH\"`" in rows["`flush_disk_type`"]
    assert "`(unset)`" in rows["`broker_service_port_tls`"]  # None: the key is left out of the TOML file
    assert "| `--scan-interval` |" in rendered  # quasar nameserver's flags
    assert "| `--slaves` |" in rendered  # quasar cluster up's flags


class _Sample:
    """A class shaped like BrokerConfig, to see what the generator reads from source.

    - ``alpha`` / ``beta_ms`` (1, 2): the first pair; ``gamma``: third (``alpha`` again in brackets).
    - lead-in (not a field): ``delta_bytes`` (0 = off) / ``..._seconds`` (60): abbreviated.
    """

    # first block (a note; more words)
    alpha: int = 1
    beta_ms: int = 2
    # second block
    gamma: str = "g"
    """Gamma's own docstring wins over the class docstring."""
    delta_bytes: int = 0
    delta_seconds: float = 60.0


def test_blocks_attribute_docstrings_and_docstring_clauses_are_read_from_source(gen: ModuleType) -> None:
    fields = list(gen._source_fields(_Sample))
    assert [(name, block) for name, _, block, _ in fields] == [
        ("alpha", "first block (a note; more words)"),
        ("beta_ms", "first block (a note; more words)"),
        ("gamma", "second block"),
        ("delta_bytes", "second block"),
        ("delta_seconds", "second block"),
    ]
    assert fields[2][3] == "Gamma's own docstring wins over the class docstring."
    assert fields[0][1] == "int"
    docs = gen._docstring_docs(_Sample.__doc__, {"alpha", "beta_ms", "gamma", "delta_bytes", "delta_seconds"})
    assert docs["alpha"] == docs["beta_ms"] == "``alpha`` / ``beta_ms`` (1, 2): the first pair"
    assert docs["gamma"] == "third (``alpha`` again in brackets)."  # its own name is the table's first cell
    # the lead-in that names no field is cut; ``..._seconds`` abbreviates delta_seconds
    abbreviated = "``delta_bytes`` (0 = off) / ``..._seconds`` (60): abbreviated."
    assert docs["delta_seconds"] == docs["delta_bytes"] == abbreviated
    assert gen._block_title("first block (a note; more words)") == ("First block", "(a note; more words)")


def test_check_mode_fails_on_a_stale_file_and_says_how_to_regenerate(
    gen: ModuleType, rendered: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stale = tmp_path / "configuration.md"
    stale.write_text(rendered.replace("| `port` | `int` | `6650` |", "| `port` | `int` | `6651` |"))
    monkeypatch.setattr(gen, "OUTPUT", stale)
    monkeypatch.setattr(gen, "ROOT", tmp_path)
    assert gen.main(["--check"]) == 1
    assert "python scripts/gen_config_reference.py" in capsys.readouterr().err
    assert gen.main([]) == 0  # regenerates
    assert stale.read_text() == rendered
    assert gen.main(["--check"]) == 0
