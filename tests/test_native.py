"""The compiled hot paths are built and used, or their twins when ``QUASAR_PURE_PYTHON=1`` asks for them.

``make test`` runs the suite twice, once each way; these tests fail when a compiled module silently fell back
to its twin (a broken build), or when the environment variable is not honoured."""

from __future__ import annotations

import importlib
import pathlib
import subprocess
import sys

import pytest

import quasar
from quasar import native

SRC = pathlib.Path(quasar.__file__).parent
BASES = sorted(
    ".".join(("quasar", *path.relative_to(SRC).with_suffix("").parts))[: -len("_c")]
    for path in SRC.glob("*/_*_c.c")
)


def test_every_compiled_module_has_a_pure_python_twin() -> None:
    assert BASES, "no compiled module found"
    for base in BASES:
        importlib.import_module(base + "_py")


@pytest.mark.skipif(native.pure_python_forced(), reason="QUASAR_PURE_PYTHON is set: the twins are wanted")
def test_compiled_modules_are_built_and_loaded() -> None:
    for base in BASES:
        assert native.load_twin(base).__name__ == base + "_c"
    assert native.fallbacks() == {}


@pytest.mark.parametrize(("value", "suffix"), [("1", "_py"), ("0", "_c"), ("", "_c")])
def test_the_environment_variable_picks_the_twins(value: str, suffix: str) -> None:
    code = (
        "from quasar import native; import sys; "
        f"sys.stdout.write(','.join(native.load_twin(b).__name__ for b in {BASES!r}))"
    )
    env = {"QUASAR_PURE_PYTHON": value, "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split(",") == [base + suffix for base in BASES]
