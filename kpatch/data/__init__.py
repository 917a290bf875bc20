"""Data shipped inside the package: the sample MIOpen-shaped kernel DB.

``sample.kdb`` is built by ``tools/build_sample_kdb.py`` from the gfx1030
fixtures under ``tests/fixtures/`` (kernels written for this project and
compiled by Debian's toolchain), with MIOpen-style keys.
"""

from __future__ import annotations

from importlib.resources import files


def sample_db_path() -> str:
    """Filesystem path of the embedded sample kernel DB."""
    return str(files("kpatch") / "data" / "sample.kdb")


SAMPLE_ALIAS = "@sample"


def expand(path: str) -> str:
    """``@sample`` names the embedded sample kernel DB wherever a path is taken."""
    return sample_db_path() if path == SAMPLE_ALIAS else path
