"""Data shipped inside the package: the sample MIOpen-shaped kernel DB, and
the one reader of kpatch's TOML data files (rule sets, the MIOpen solver
table).

``sample.kdb`` is built by ``tools/build_sample_kdb.py`` from the gfx1030
fixtures under ``tests/fixtures/`` (kernels written for this project and
compiled by Debian's toolchain), with MIOpen-style keys.
"""

from __future__ import annotations

import tomllib
from importlib.resources import files

from kpatch.errors import FormatError, UsageError


def read_toml(path: str, name: str | None = None) -> dict:
    """The TOML document in the file ``path``.  A file that cannot be read
    is a UsageError naming ``path``; one that is not valid TOML a
    FormatError naming the file as ``name`` (default: ``path``).  What the
    document must hold is the caller's to check (FormatError too)."""
    return parse_toml(read_bytes(path), name or path)


def read_bytes(path: str) -> bytes:
    """The contents of the file ``path``; UsageError naming it when it cannot be read."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise UsageError(e.strerror or str(e), path) from None


def parse_toml(data: bytes, name: str) -> dict:
    """The TOML document ``data`` (a file's bytes, as :func:`read_toml` reads
    them); FormatError naming it ``name`` when it is not valid TOML (which
    is UTF-8 text)."""
    try:
        return tomllib.loads(data.decode())
    except UnicodeDecodeError as e:
        raise FormatError(f"not valid TOML: not UTF-8 text (byte {e.start})", name) from None
    except tomllib.TOMLDecodeError as e:
        raise FormatError(f"not valid TOML: {e}", name) from None


def sample_db_path() -> str:
    """Filesystem path of the embedded sample kernel DB."""
    return str(files("kpatch") / "data" / "sample.kdb")


SAMPLE_ALIAS = "@sample"


def expand(path: str) -> str:
    """``@sample`` names the embedded sample kernel DB wherever a path is taken."""
    return sample_db_path() if path == SAMPLE_ALIAS else path
