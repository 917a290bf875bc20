"""Where MIOpen looks for its user kernel DB, and where kpatch may write.

* File name (MIOpen's ``Handle::GetDbBasename``): ``<DbId>_<num_cu>`` when
  num_cu <= 64, else ``<DbId><num_cu in lowercase hex>``; user DBs end in
  ``.ukdb``.  DbId is the processor name (``gfx1030``).
* Directory (MIOpen's ``ComputeUserCachePath``): ``~/.cache/miopen/<version>``
  where version is ``MAJOR.MINOR.PATCH.TWEAK`` of the MIOpen that runs.
  ``MIOPEN_CUSTOM_CACHE_DIR`` replaces ``~/.cache/miopen/<version>`` up to
  MIOpen 3.4 and replaces only ``~/.cache/miopen`` from 3.5 on (the version
  is appended).
* The MIOpen version comes from ``include/miopen/version.h`` of an installed
  MIOpen (``/opt/rocm*``, ``/usr``) or, failing that, from the version-named
  directories MIOpen has already created in the cache directory; the newest
  wins and the choice is reported.

kpatch never writes into a system directory: :func:`check_output_dir`
refuses ``/usr``, ``/opt`` and the like, the directory of any source system
DB, and directories the user cannot write.
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass
from typing import Iterable, Mapping

from kpatch.errors import UsageError

#: MIOpen's default cache root (its MIOPEN_CACHE_DIR build setting).
DEFAULT_CACHE_ROOT = os.path.join("~", ".cache", "miopen")
#: First MIOpen version that appends <version> to MIOPEN_CUSTOM_CACHE_DIR.
CUSTOM_DIR_APPENDS_VERSION = (3, 5)
#: Where an installed MIOpen's version.h is looked for.
DEFAULT_ROCM_ROOTS = ("/opt/rocm", "/opt/rocm-*", "/usr", "/usr/local")
#: Directories kpatch never writes into (nor below).
SYSTEM_DIRS = ("/usr", "/opt", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
               "/boot", "/sys", "/proc", "/dev", "/var/lib", "/snap")

_VERSION_DIR = re.compile(r"^(\d+)\.(\d+)\.(\d+)\.([0-9A-Za-z_+-]+)$")
_DEFINE = re.compile(r"^\s*#\s*define\s+MIOPEN_VERSION_(MAJOR|MINOR|PATCH|TWEAK)\s+(\S+)", re.M)


def db_basename(db_id: str, num_cu: int) -> str:
    """MIOpen's DB base name: ``gfx1030_18``; ``gfx90a6e`` above 64 CUs."""
    if num_cu <= 0:
        raise UsageError(f"CU count must be positive, not {num_cu}")
    return f"{db_id}_{num_cu}" if num_cu <= 64 else f"{db_id}{num_cu:x}"


def user_db_name(db_id: str, num_cu: int) -> str:
    """File name of MIOpen's user kernel DB, e.g. ``gfx1030_18.ukdb``."""
    return db_basename(db_id, num_cu) + ".ukdb"


@dataclass(frozen=True, order=True)
class MiopenVersion:
    """``MAJOR.MINOR.PATCH.TWEAK`` as MIOpen names its cache directory."""

    major: int
    minor: int
    patch: int
    tweak: str

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}.{self.tweak}"

    @property
    def numbers(self) -> tuple[int, int, int]:
        return (self.major, self.minor, self.patch)

    @classmethod
    def parse(cls, text: str) -> "MiopenVersion | None":
        m = _VERSION_DIR.match(text)
        return cls(int(m.group(1)), int(m.group(2)), int(m.group(3)), m.group(4)) if m else None


def read_version_header(path: str) -> MiopenVersion | None:
    """The version in an installed ``miopen/version.h``, or None."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read(1 << 16)
    except OSError:
        return None
    found = dict(_DEFINE.findall(text))
    if not all(k in found for k in ("MAJOR", "MINOR", "PATCH", "TWEAK")):
        return None
    return MiopenVersion.parse(f"{found['MAJOR']}.{found['MINOR']}.{found['PATCH']}.{found['TWEAK']}")


def installed_versions(rocm_roots: Iterable[str] = DEFAULT_ROCM_ROOTS) -> list[tuple[MiopenVersion, str]]:
    """(version, version.h path) of every MIOpen installed under the roots."""
    out = []
    seen = set()
    for pattern in rocm_roots:
        for root in sorted(glob.glob(pattern)):
            header = os.path.join(root, "include", "miopen", "version.h")
            real = os.path.realpath(header)
            if real in seen:
                continue
            seen.add(real)
            v = read_version_header(header)
            if v is not None:
                out.append((v, header))
    return out


def version_dirs(parent: str) -> list[tuple[MiopenVersion, str]]:
    """(version, path) of the version-named directories in ``parent``."""
    try:
        names = os.listdir(parent)
    except OSError:
        return []
    out = []
    for n in names:
        v = MiopenVersion.parse(n)
        if v is not None and os.path.isdir(os.path.join(parent, n)):
            out.append((v, os.path.join(parent, n)))
    return out


@dataclass(frozen=True)
class CacheDir:
    """MIOpen's user cache directory and why kpatch thinks so."""

    path: str
    why: str


def _newest(found: list[tuple[MiopenVersion, str]]) -> tuple[MiopenVersion, str]:
    """The highest version; on a tie, an existing directory, then the most recently modified."""

    def key(vp: tuple[MiopenVersion, str]) -> tuple:
        exists = os.path.isdir(vp[1])
        return (vp[0].numbers, exists, os.path.getmtime(vp[1]) if exists else 0.0)

    return max(found, key=key)


def resolve_cache_dir(env: Mapping[str, str], *, home: str | None = None,
                      rocm_roots: Iterable[str] = DEFAULT_ROCM_ROOTS) -> CacheDir:
    """MIOpen's user cache directory (see the module doc); UsageError asking
    for ``--out-dir`` when it cannot be known.

    Candidates are the installed MIOpen versions (``version.h``) and the
    version directories already in ``~/.cache/miopen`` (an MIOpen shipped
    inside e.g. a PyTorch wheel has no version.h, but creates its directory
    when it runs); the newest wins."""
    home = home if home is not None else os.path.expanduser("~")
    installed = installed_versions(rocm_roots)
    custom = env.get("MIOPEN_CUSTOM_CACHE_DIR", "")
    if custom:
        custom = os.path.join(home, custom[2:]) if custom.startswith("~/") else custom
        return _custom_dir(os.path.abspath(custom), _newest(installed) if installed else None)
    root = os.path.join(home, ".cache", "miopen")
    candidates = [(v, os.path.join(root, str(v))) for v, _ in installed] + version_dirs(root)
    if not candidates:
        raise UsageError(f"cannot find MIOpen's user cache directory: no MIOpen version.h under "
                         f"{', '.join(rocm_roots)} and no version directory in {root} (run MIOpen once, "
                         "or pass --out-dir DIR)")
    v, path = _newest(candidates)
    headers = [h for iv, h in installed if str(iv) == str(v)]
    source = f"MIOpen {v} installed ({headers[0]})" if headers else f"existing MIOpen cache directory {v}"
    others = sorted({str(cv) for cv, _ in candidates} - {str(v)})
    more = f"; also found {', '.join(others)}" if others else ""
    return CacheDir(path, f"newest MIOpen: {source}{more}")


def _custom_dir(custom: str, installed: tuple[MiopenVersion, str] | None) -> CacheDir:
    if installed is not None:
        v, header = installed
        if v.numbers >= CUSTOM_DIR_APPENDS_VERSION:
            return CacheDir(os.path.join(custom, str(v)),
                            f"MIOPEN_CUSTOM_CACHE_DIR + version (MIOpen {v} >= 3.5 appends it; {header})")
        return CacheDir(custom, f"MIOPEN_CUSTOM_CACHE_DIR (MIOpen {v} < 3.5 uses it as is; {header})")
    found = version_dirs(custom)
    if found:
        v, path = _newest(found)
        return CacheDir(path, f"MIOPEN_CUSTOM_CACHE_DIR has MIOpen version directories (3.5+ layout): newest {v}")
    if glob.glob(os.path.join(glob.escape(custom), "*.ukdb")):
        return CacheDir(custom, "MIOPEN_CUSTOM_CACHE_DIR holds user kernel DBs directly (MIOpen < 3.5 layout)")
    raise UsageError(f"MIOPEN_CUSTOM_CACHE_DIR={custom}: cannot tell whether your MIOpen appends its version "
                     "to it (3.5+) or not (no installed version.h, no version directory, no .ukdb in it); "
                     "pass --out-dir DIR")


# --- where kpatch may write ----------------------------------------------------


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def check_output_dir(out_dir: str, system_sources: Iterable[str] = (), *, create: bool = False,
                     system_dirs: Iterable[str] = SYSTEM_DIRS) -> str:
    """The real path of ``out_dir`` if kpatch may write there; UsageError if
    it is (under) a system directory, is the directory of a source system DB,
    or is not writable by this user.  With ``create``, a missing directory is
    created (after the same checks on the path)."""
    real = os.path.realpath(out_dir)
    for root in system_dirs:
        if _under(real, os.path.realpath(root)) or _under(real, root):
            raise UsageError(f"refusing to write into system directory {root} (resolved {real}): "
                             "kpatch never changes system files (MIOpen's user cache is under your home)", out_dir)
    for src in system_sources:
        src_dir = os.path.realpath(os.path.dirname(os.path.abspath(src)))
        if real == src_dir:
            raise UsageError(f"refusing to write next to the system kernel DB {src}; use MIOpen's user "
                             "cache directory (the default) or another --out-dir", out_dir)
    if os.path.exists(real):
        if not os.path.isdir(real):
            raise UsageError("is not a directory", out_dir)
        if not os.access(real, os.W_OK | os.X_OK):
            raise UsageError("directory is not writable by you", out_dir)
        return real
    parent = real
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"does not exist and {parent} is not writable by you", out_dir)
    if create:
        os.makedirs(real, exist_ok=True)
    return real
