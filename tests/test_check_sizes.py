"""scripts/check_sizes.py: the "no source file over 600 lines" check that `make test` runs."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "check_sizes.py"


@pytest.fixture(scope="module")
def check_sizes() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_sizes", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["check_sizes"] = module
    spec.loader.exec_module(module)
    return module


def _write_lines(path: Path, count: int, *, final_newline: bool = True) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "\n".join(f"x{i} = {i}" for i in range(count))
    path.write_text(text + ("\n" if final_newline else ""))


def test_counts_lines_like_wc_plus_an_unterminated_last_line(check_sizes: ModuleType, tmp_path: Path) -> None:
    _write_lines(tmp_path / "a.py", 3)
    _write_lines(tmp_path / "b.py", 3, final_newline=False)
    (tmp_path / "c.py").write_text("")
    assert check_sizes.count_lines(tmp_path / "a.py") == 3
    assert check_sizes.count_lines(tmp_path / "b.py") == 3
    assert check_sizes.count_lines(tmp_path / "c.py") == 0


def test_reports_files_over_the_limit_longest_first_and_skips_generated_protobuf(
    check_sizes: ModuleType, tmp_path: Path
) -> None:
    _write_lines(tmp_path / "ok.py", 10)
    _write_lines(tmp_path / "pkg" / "long.py", 11)
    _write_lines(tmp_path / "pkg" / "longer.py", 12)
    _write_lines(tmp_path / "proto" / "PulsarApi_pb2.py", 50)
    _write_lines(tmp_path / "notes.txt", 50)
    found = check_sizes.oversized_files([tmp_path], 10)
    assert [(path.name, lines) for path, lines in found] == [("longer.py", 12), ("long.py", 11)]


def test_main_exit_status_and_report(
    check_sizes: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write_lines(tmp_path / "small.py", 5)
    assert check_sizes.main(["--max-lines", "5", str(tmp_path)]) == 0
    _write_lines(tmp_path / "big.py", 6)
    assert check_sizes.main(["--max-lines", "5", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "big.py: 6 lines (limit 5)" in err
    assert "small.py" not in err


def test_main_refuses_a_missing_root_and_a_non_positive_limit(
    check_sizes: ModuleType, tmp_path: Path
) -> None:
    with pytest.raises(SystemExit) as missing:
        check_sizes.main([str(tmp_path / "absent")])
    assert missing.value.code == 2
    with pytest.raises(SystemExit) as zero:
        check_sizes.main(["--max-lines", "0", str(tmp_path)])
    assert zero.value.code == 2


def test_long_functions_counts_decorators_and_nested_methods(check_sizes: ModuleType, tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(5))
    (tmp_path / "m.py").write_text(
        f"@decorator\ndef top():\n{body}\n\n"
        f"class C:\n    async def method(self):\n{body.replace('    ', '        ')}\n\n"
        "def short():\n    pass\n"
    )
    (tmp_path / "gen_pb2.py").write_text(f"def generated():\n{body}\n")
    found = check_sizes.long_functions([tmp_path], 5)
    assert [(name, lines) for _, name, lines in found] == [("top", 7), ("C.method", 6)]


def test_report_functions_is_information_only(
    check_sizes: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(9))
    (tmp_path / "m.py").write_text(f"def long():\n{body}\n")
    assert check_sizes.main(["--report-functions", "5", str(tmp_path)]) == 0
    assert "m.py: long() is 10 lines (guideline 5)" in capsys.readouterr().out
