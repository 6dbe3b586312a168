"""Fail when a Python source file under src/quasar is longer than the limit (600 lines by default).

Issue 12's rule: no source file over ~600 lines. Generated protobuf modules (``*_pb2.py``) are excluded.
Run by ``make test`` and ``make sizes``; exit status 0 when every file is within the limit, 1 otherwise,
with one line per offending file (longest first) on stderr.

``--report-functions N`` also lists the functions longer than N lines (the ~80-line guideline): for
information only, it never changes the exit status, since a long function is fine where no real boundary
exists.

Usage: ``python scripts/check_sizes.py [--max-lines N] [--report-functions N] [ROOT ...]`` (ROOT defaults to
src/quasar).
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

DEFAULT_MAX_LINES = 600
DEFAULT_ROOT = Path(__file__).resolve().parent.parent / "src" / "quasar"
#: Generated code, checked in but never edited by hand.
GENERATED_SUFFIXES = ("_pb2.py",)


def count_lines(path: Path) -> int:
    """Lines in ``path`` as ``wc -l`` counts them, plus a last line without a newline."""
    data = path.read_bytes()
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def oversized_files(roots: Iterable[Path], max_lines: int) -> list[tuple[Path, int]]:
    """``(path, lines)`` of every ``*.py`` file under ``roots`` longer than ``max_lines``, longest first.

    Raises:
        FileNotFoundError: a root does not exist.
    """
    found: list[tuple[Path, int]] = []
    for root in roots:
        if not root.exists():
            raise FileNotFoundError(f"no such directory: {root}")
        for path in sorted(root.rglob("*.py")):
            if path.name.endswith(GENERATED_SUFFIXES):
                continue
            lines = count_lines(path)
            if lines > max_lines:
                found.append((path, lines))
    found.sort(key=lambda item: (-item[1], str(item[0])))
    return found


def long_functions(roots: Iterable[Path], max_lines: int) -> list[tuple[Path, str, int]]:
    """``(path, qualified name, lines)`` of every function or method under ``roots`` (decorators and
    docstring included) longer than ``max_lines``, longest first; generated modules skipped."""
    found: list[tuple[Path, str, int]] = []
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            if path.name.endswith(GENERATED_SUFFIXES):
                continue
            tree = ast.parse(path.read_bytes(), filename=str(path))
            found.extend((path, name, lines) for name, lines in _function_lengths(tree) if lines > max_lines)
    found.sort(key=lambda item: (-item[2], str(item[0]), item[1]))
    return found


def _function_lengths(node: ast.AST, prefix: str = "") -> Iterable[tuple[str, int]]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            name = f"{prefix}{child.name}"
            if not isinstance(child, ast.ClassDef):
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                yield name, (child.end_lineno or child.lineno) - first + 1
            yield from _function_lengths(child, f"{name}.")


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("roots", nargs="*", type=Path, default=[DEFAULT_ROOT], help="directories to scan")
    parser.add_argument("--max-lines", type=int, default=DEFAULT_MAX_LINES, help="longest allowed file")
    parser.add_argument(
        "--report-functions",
        type=int,
        metavar="N",
        help="also list functions over N lines (information only)",
    )
    args = parser.parse_args(argv)
    if args.max_lines < 1:
        parser.error(f"--max-lines must be positive, got {args.max_lines}")
    try:
        offenders = oversized_files(args.roots, args.max_lines)
    except FileNotFoundError as exc:
        parser.error(str(exc))
    for path, lines in offenders:
        print(f"{_display(path)}: {lines} lines (limit {args.max_lines})", file=sys.stderr)
    if args.report_functions is not None:
        for path, name, lines in long_functions(args.roots, args.report_functions):
            print(f"{_display(path)}: {name}() is {lines} lines (guideline {args.report_functions})")
    if offenders:
        print(f"{len(offenders)} file(s) over {args.max_lines} lines", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
