"""Compiled hot paths and their pure-Python twins: which one runs (DESIGN.md "Compiled hot paths").

Every compiled module lives in the package of its layer next to its twin, with the same API:
``quasar/<layer>/_<name>_c.c`` (built by ``pip install -e .`` through ``setup.py``) and
``quasar/<layer>/_<name>_py.py``. The module that the rest of Quasar imports picks one with::

    from quasar.native import load_twin
    _impl = load_twin("quasar.protocol._frames")  # quasar.protocol._frames_c, else _frames_py

Rules:
- ``QUASAR_PURE_PYTHON=1`` (any value but ``""`` and ``"0"``) forces every twin; the test suite runs once
  each way (``make test``).
- A compiled module that cannot be imported (no compiler when the package was installed, or a build left
  out) falls back to its twin with one warning; :func:`fallbacks` lists those, and the test suite fails when
  any exists while compiled code is wanted, so a broken build never passes unseen.

This module imports nothing of Quasar, so every layer may use it, as it uses ``quasar.errors``.
"""

from __future__ import annotations

import importlib
import logging
import os
from types import ModuleType

__all__ = ["PURE_PYTHON_ENV", "compiled_modules", "fallbacks", "load_twin", "pure_python_forced"]

log = logging.getLogger(__name__)

PURE_PYTHON_ENV = "QUASAR_PURE_PYTHON"
"""The environment variable that forces the pure-Python twins."""

_loaded: dict[str, ModuleType] = {}
_fallbacks: dict[str, str] = {}


def pure_python_forced() -> bool:
    """True when ``QUASAR_PURE_PYTHON`` is set to anything but ``""`` or ``"0"``."""
    return os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0")


def load_twin(base: str) -> ModuleType:
    """The implementation of ``base``: the compiled ``base + "_c"``, or the pure-Python ``base + "_py"``.

    Args:
        base: dotted module name without the suffix, e.g. ``"quasar.protocol._frames"``.

    Returns:
        The module (cached: later calls return the same object).

    Raises:
        ImportError: the pure-Python twin itself cannot be imported (a packaging bug).
    """
    module = _loaded.get(base)
    if module is not None:
        return module
    if pure_python_forced():
        module = importlib.import_module(base + "_py")
    else:
        try:
            module = importlib.import_module(base + "_c")
        except ImportError as exc:
            _fallbacks[base] = str(exc)
            log.warning("compiled %s_c is not available (%s): using the pure-Python twin", base, exc)
            module = importlib.import_module(base + "_py")
    _loaded[base] = module
    return module


def fallbacks() -> dict[str, str]:
    """Twins loaded because their compiled module failed to import: ``{base: import error text}``."""
    return dict(_fallbacks)


def compiled_modules() -> list[str]:
    """Names of the loaded implementations that are compiled (for the broker's start-up log)."""
    return sorted(module.__name__ for module in _loaded.values() if module.__name__.endswith("_c"))
