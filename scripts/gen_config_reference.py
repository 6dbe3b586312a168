"""Generate docs/configuration.md from the code, so the configuration reference cannot drift.

Sources, all read from the code as it is now:

- ``quasar.broker.config.BrokerConfig``: every field in declaration order with its type (as annotated), its
  default (``repr`` of the dataclass default, TOML-spelled), grouped by the ``# block`` comment lines of the
  class body. A field's description is its attribute docstring (a string literal right below the field) when
  it has one, else the first clause of the class docstring's bullets that names it in double backticks
  outside brackets (clauses are split at ``;`` outside brackets; ``_suffix`` / ``..._suffix`` abbreviate a
  field named in the same bullet). A block comment's text up to `` (`` is the block's title, the rest its note.
- the click commands ``quasar standalone`` and ``quasar broker``: which flag sets which field (a flag whose
  destination is a field name), and their own defaults where they differ from the dataclass's.
- the click commands ``quasar nameserver`` and ``quasar cluster up``: their flags (the name server and the
  local cluster have no config file).

Usage (from the repository root)::

    python scripts/gen_config_reference.py            # rewrite docs/configuration.md
    python scripts/gen_config_reference.py --check    # exit 1 when the checked-in file differs

``tests/test_config_reference.py`` runs the check. Imports ``quasar`` (put ``src`` on ``PYTHONPATH`` or install
the package).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import re
import sys
import textwrap
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "docs" / "configuration.md"
REGENERATE = "python scripts/gen_config_reference.py"

_FIRST_BLOCK = "General"
"""Title of the fields declared before the first block comment (none today: config.py starts with one)."""


@dataclass(frozen=True)
class Field:
    """One BrokerConfig field as the reference shows it."""

    name: str
    type: str
    default: str
    block: str
    doc: str


def _source_fields(cls: type) -> Iterator[tuple[str, str, str, str | None]]:
    """(name, annotation source, block title, attribute docstring or None) of ``cls``'s fields in source
    order; the block title is the text of the comment lines right above the field that opens a block."""
    source = textwrap.dedent(inspect.getsource(cls))
    lines = source.splitlines()
    tree = ast.parse(source)
    body = tree.body[0]
    assert isinstance(body, ast.ClassDef)
    block = _FIRST_BLOCK
    statements = body.body
    for index, node in enumerate(statements):
        if not isinstance(node, ast.AnnAssign) or not isinstance(node.target, ast.Name):
            continue
        comment = _comment_above(lines, node.lineno - 1)
        if comment:
            block = comment
        doc = None
        following = statements[index + 1] if index + 1 < len(statements) else None
        if (
            isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            doc = inspect.cleandoc(following.value.value)
        yield node.target.id, ast.unparse(node.annotation), block, doc


def _comment_above(lines: list[str], line_index: int) -> str:
    """The ``#`` comment lines directly above ``lines[line_index]`` joined into one string ("" if none)."""
    parts: list[str] = []
    index = line_index - 1
    while index >= 0 and lines[index].strip().startswith("#"):
        parts.insert(0, lines[index].strip().lstrip("#").strip())
        index -= 1
    return " ".join(parts)


def _bullets(docstring: str) -> list[str]:
    """The ``- `` bullets of a docstring, each joined into one line."""
    bullets: list[str] = []
    for line in inspect.cleandoc(docstring).splitlines():
        stripped = line.strip()
        if line.startswith("- "):
            bullets.append(stripped[2:])
        elif bullets and line.startswith("  ") and stripped:
            bullets[-1] += " " + stripped
    return bullets


def _scan(text: str) -> Iterator[tuple[int, str, int]]:
    """(index, character, bracket depth) of each character of ``text`` outside double-backtick literals."""
    depth = 0
    in_literal = False
    index = 0
    while index < len(text):
        if text.startswith("``", index):
            in_literal = not in_literal
            index += 2
            continue
        char = text[index]
        if not in_literal:
            if char in "([":
                depth += 1
            elif char in ")]":
                depth = max(0, depth - 1)
            yield index, char, depth
        index += 1


def _clauses(text: str) -> list[str]:
    """``text`` split at ``;`` that stand outside brackets and double-backtick literals."""
    clauses: list[str] = []
    start = 0
    for index, char, depth in _scan(text):
        if char == ";" and depth == 0:
            clauses.append(text[start:index].strip())
            start = index + 1
    clauses.append(text[start:].strip())
    return [c for c in clauses if c]


def _outside_brackets(text: str) -> str:
    """``text`` without what stands inside brackets (double-backtick literals kept whole)."""
    inside = [False] * len(text)
    for index, char, depth in _scan(text):
        inside[index] = depth > 0 or char in ")]"
    kept: list[str] = []
    index = 0
    while index < len(text):
        if text.startswith("``", index):
            end = text.find("``", index + 2)
            end = len(text) if end < 0 else end + 2
            if not inside[index - 1] if index else True:
                kept.append(text[index:end])
            index = end
            continue
        if not inside[index]:
            kept.append(text[index])
        index += 1
    return "".join(kept)


_LITERAL = re.compile(r"``([^`]+)``")


def _mentioned(text: str, names: set[str], context: set[str]) -> set[str]:
    """Field names ``text`` mentions as ````name````; ````_suffix```` / ````..._suffix```` name the field of
    ``context`` (fields of the same bullet) with that suffix replaced."""
    found: set[str] = set()
    for literal in _LITERAL.findall(text):
        if literal in names:
            found.add(literal)
        elif literal.lstrip(".").startswith("_"):
            suffix = literal.lstrip(".")
            for other in context:
                stem = other.rsplit("_", 1)[0]
                while stem:
                    if stem + suffix in names and stem + suffix != other:
                        found.add(stem + suffix)
                        break
                    stem = stem.rsplit("_", 1)[0] if "_" in stem else ""
    return found


def _docstring_docs(docstring: str, names: set[str]) -> dict[str, str]:
    """Field name -> the first docstring clause that names it outside brackets ("" when none does)."""
    docs: dict[str, str] = dict.fromkeys(names, "")
    for bullet in _bullets(docstring):
        in_bullet = {literal for literal in _LITERAL.findall(bullet) if literal in names}
        for clause in _clauses(_without_lead_in(bullet, names)):
            for name in _mentioned(_outside_brackets(clause), names, in_bullet):
                docs[name] = docs[name] or _without_own_name(clause, name)
    return docs


def _without_lead_in(bullet: str, names: set[str]) -> str:
    """``bullet`` without a lead-in that names no field (``"TLS (...): ``a`` ..."`` -> ``"``a`` ..."``)."""
    for index, char, depth in _scan(bullet):
        if char == ":" and depth == 0 and bullet[index + 1 : index + 2] == " ":
            if _mentioned(_outside_brackets(bullet[:index]), names, set()):
                return bullet
            return bullet[index + 2 :]
    return bullet


def _without_own_name(clause: str, name: str) -> str:
    """``clause`` without a leading ````name````: (the table names the field already)."""
    prefix = f"``{name}``: "
    return clause[len(prefix) :] if clause.startswith(prefix) else clause


def _toml(value: Any) -> str:
    """``value`` spelled as in a TOML config file (``None``: the key is left out)."""
    if value is None:
        return "(unset)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, Path):
        return f'"{value}"'
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return repr(value)


def _default(field: dataclasses.Field[Any]) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    raise ValueError(f"field {field.name} has no default")


def _rst_to_markdown(text: str) -> str:
    """Double backticks to single ones, and table-safe (``|`` escaped)."""
    return text.replace("``", "`").replace("|", "\\|")


def broker_fields() -> list[Field]:
    """Every BrokerConfig field with its block and description."""
    from quasar.broker.config import BrokerConfig

    defaults = {f.name: _default(f) for f in dataclasses.fields(BrokerConfig)}
    names = set(defaults)
    from_docstring = _docstring_docs(BrokerConfig.__doc__ or "", names)
    fields: list[Field] = []
    for name, annotation, block, attribute_doc in _source_fields(BrokerConfig):
        doc = " ".join((attribute_doc or from_docstring[name]).split())
        fields.append(Field(name, annotation, _toml(defaults[name]), block, doc))
    if {f.name for f in fields} != names:
        raise RuntimeError("the source walk and dataclasses.fields() disagree on BrokerConfig's fields")
    return fields


def _flag(param: click.Parameter) -> str:
    assert isinstance(param, click.Option)
    return max(param.opts, key=len)


def config_flags(command: click.Command, fields: set[str]) -> dict[str, tuple[str, Any]]:
    """Field name -> (flag, the command's own default) for the options of ``command`` that set a field."""
    flags: dict[str, tuple[str, Any]] = {}
    for param in command.params:
        if isinstance(param, click.Option) and param.name in fields:
            default = param.default if isinstance(param.default, (str, int, float)) else None
            flags[param.name] = (_flag(param), None if param.required else default)
    return flags


def _type_name(param: click.Parameter) -> str:
    kind = param.type
    if isinstance(kind, click.Choice):
        return " \\| ".join(str(c) for c in kind.choices)
    if isinstance(kind, click.Path):
        return "path"
    if isinstance(param, click.Option) and param.is_flag:
        return "flag"
    return kind.name


def _flag_default(param: click.Parameter) -> str:
    if isinstance(param, click.Option) and param.required:
        return "(required)"
    if param.default is None:
        return "—"
    return f"`{param.default}`"


def flags_table(command: click.Command) -> list[str]:
    """A Markdown table of ``command``'s options: flag, type, default, help."""
    rows = ["| flag | type | default | meaning |", "|---|---|---|---|"]
    for param in command.params:
        if not isinstance(param, click.Option) or param.hidden:
            continue
        text = " ".join((param.help or "").split()).replace("|", "\\|")
        rows.append(f"| `{_flag(param)}` | {_type_name(param)} | {_flag_default(param)} | {text} |")
    return rows


def _blocks(fields: Iterable[Field]) -> list[tuple[str, list[Field]]]:
    blocks: list[tuple[str, list[Field]]] = []
    for field in fields:
        if not blocks or blocks[-1][0] != field.block:
            blocks.append((field.block, []))
        blocks[-1][1].append(field)
    return blocks


def _block_title(comment: str) -> tuple[str, str]:
    """A block comment as (title, note): ``storage (RocketMQ names; ...)`` -> ("Storage", "(RocketMQ names; ...)")."""
    title, _, note = comment.partition(" (")
    return title[:1].upper() + title[1:], (f"({note}" if note else "")


def _anchor(title: str) -> str:
    slug = re.sub(r"[^\w\- ]", "", title.lower()).strip().replace(" ", "-")
    return slug


def render() -> str:
    """The whole of docs/configuration.md."""
    from quasar.cli.broker import DEFAULT_CLUSTER_NAME, broker
    from quasar.cli.cluster import cluster
    from quasar.cli.nameserver import nameserver
    from quasar.cli.standalone import standalone

    fields = broker_fields()
    names = {f.name for f in fields}
    standalone_flags = config_flags(standalone, names)
    broker_flags = config_flags(broker, names)
    if "cluster_name" in broker_flags:  # None on the option: the config file's value wins over this default
        broker_flags["cluster_name"] = (broker_flags["cluster_name"][0], DEFAULT_CLUSTER_NAME)
    out: list[str] = [
        "# Configuration reference",
        "",
        f"<!-- Generated by scripts/gen_config_reference.py from the code; do not edit. Regenerate: {REGENERATE} -->",
        "",
        "Generated from `quasar.broker.config.BrokerConfig` (fields, types, defaults, the `# block` comments",
        "and the documentation of each field) and from the `quasar` commands' options, by",
        f"`{REGENERATE}`; a test fails when this file and the code disagree.",
        "",
        "## How a setting is given",
        "",
        "- **Config file**: `quasar standalone --config FILE` and `quasar broker --config FILE` read a TOML file",
        "  of `key = value` lines, the keys being the field names below (`flush_disk_type = \"ASYNC_FLUSH\"`,",
        "  `authentication_providers = [\"token\"]`). An unknown key or a bad value stops the broker before it",
        "  starts, with the reason and the list of valid keys. A key left out keeps its default; `(unset)` below",
        "  means the setting is off until a value is given (TOML has no null).",
        "- **Command-line flags**: the flags in the tables below set the same fields; a flag given on the command",
        "  line wins over the file; `quasar broker` names its cluster `quasar-cluster` when neither gives",
        "  `cluster_name`. `--config FILE` and `--log-level` (DEBUG, INFO, WARNING, ERROR; default INFO; logs go",
        "  to stderr) are flags only.",
        "- **Environment variables**: no broker setting is read from the environment. The environment only",
        "  chooses the implementation (`QUASAR_PURE_PYTHON=1`: the pure-Python twins of the compiled hot paths)",
        "  and, for `quasar admin`, the token (`QUASAR_AUTH_TOKEN`).",
        "- **At run time**: namespace and topic policies (retention, TTL, backlog quota, deduplication,",
        "  permissions, schema compatibility, compaction threshold) are set through the admin REST API and win",
        "  over the `default_*` / `broker_*` settings here, as in Pulsar.",
        "",
        "Names are Pulsar's `broker.conf` names in snake_case where Pulsar has the setting (RocketMQ's",
        "`MessageStoreConfig` / `BrokerConfig` names for storage, name servers and replication); units are in",
        "the names (`_ms`, `_s`/`_seconds`, `_mb`, `_h`; sizes without a unit are bytes).",
        "",
        "## Broker settings (`quasar standalone`, `quasar broker`)",
        "",
    ]
    blocks = _blocks(fields)
    for comment, _ in blocks:
        title = _block_title(comment)[0]
        out.append(f"- [{title}](#{_anchor(title)})")
    out.append("")
    for comment, block_fields in blocks:
        title, note = _block_title(comment)
        out += [f"### {title}", ""]
        if note:
            out += [_rst_to_markdown(note).replace("\\|", "|"), ""]
        out += ["| key | type | default | flag | meaning |", "|---|---|---|---|---|"]
        first_with_doc: dict[str, str] = {}
        for field in block_fields:
            doc = _rst_to_markdown(field.doc) or "(undocumented)"
            if doc in first_with_doc:
                doc = f"see `{first_with_doc[doc]}`"
            else:
                first_with_doc[doc] = field.name
            out.append(
                f"| `{field.name}` | `{_rst_to_markdown(field.type)}` | `{field.default}` |"
                f" {_flag_cell(field.name, standalone_flags, broker_flags)} | {doc} |"
            )
        out.append("")
    up = cluster.commands["up"] if isinstance(cluster, click.Group) else cluster
    out += [
        "## Name server (`quasar nameserver`)",
        "",
        "The name server keeps no state on disk and has no config file: every setting is a flag. Brokers drop",
        "out of its routes after 120 s without a registration (RocketMQ's broker channel expiry).",
        "",
        *flags_table(nameserver),
        "",
        "## Local cluster (`quasar cluster up`)",
        "",
        "`quasar cluster up` starts etcd, the name servers and the brokers as child processes (docs/cluster.md);",
        "it passes its brokers no config file, so they run with the defaults above except what these flags set.",
        "",
        *flags_table(up),
        "",
    ]
    return "\n".join(out)


def _flag_cell(name: str, standalone: dict[str, tuple[str, Any]], broker: dict[str, tuple[str, Any]]) -> str:
    """Which flags set field ``name``: the same flag on both commands, or each command's own."""
    s, b = standalone.get(name), broker.get(name)
    if s is None and b is None:
        return ""
    if s is not None and b is not None and s[0] == b[0]:
        text = f"`{s[0]}`"
    else:
        parts = []
        if s is not None:
            parts.append(f"`{s[0]}` (standalone)")
        if b is not None:
            parts.append(f"`{b[0]}` (broker)")
        text = ", ".join(parts)
    if b is not None and b[1] is not None:
        text += f"; `quasar broker` default `{b[1]}`"
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate docs/configuration.md from BrokerConfig.")
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/configuration.md is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
        if current != text:
            print(f"{OUTPUT.relative_to(ROOT)} is stale; regenerate it with: {REGENERATE}", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUTPUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
