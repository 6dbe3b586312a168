"""Build of the compiled hot paths (the rest of the packaging is in pyproject.toml).

Every ``src/quasar/<layer>/_<name>_c.c`` becomes the extension module ``quasar.<layer>._<name>_c``; shared
C headers live in ``src/quasar/_cinclude``. Each has a pure-Python twin (``_<name>_py.py``, same API) that
``quasar.native.load_twin`` uses when ``QUASAR_PURE_PYTHON=1`` is set. ``pip install -e .`` builds them in
place.
"""

from pathlib import Path

from setuptools import Extension, setup

SRC = Path(__file__).resolve().parent / "src"
INCLUDE = SRC / "quasar" / "_cinclude"
CFLAGS = [
    "-O2",
    "-std=c11",
    "-Wall",
    "-Wextra",
    "-Wno-unused-parameter",
    "-Werror=implicit-function-declaration",
]


def extensions() -> list[Extension]:
    found = []
    headers = [str(h.relative_to(SRC.parent)) for h in sorted(INCLUDE.glob("*.h"))]
    for source in sorted(SRC.glob("quasar/**/_*_c.c")):
        module = ".".join(source.relative_to(SRC).with_suffix("").parts)
        found.append(
            Extension(
                module,
                [str(source.relative_to(SRC.parent))],
                include_dirs=[str(INCLUDE.relative_to(SRC.parent))],
                depends=headers,
                extra_compile_args=CFLAGS,
            )
        )
    return found


setup(ext_modules=extensions())
