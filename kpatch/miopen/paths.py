"""Where MIOpen looks for its user kernel DB, and where kpatch may write.

* File name (MIOpen's ``Handle::GetDbBasename``): ``<DbId>_<num_cu>`` when
  num_cu <= 64, else ``<DbId><num_cu in lowercase hex>``; user DBs end in
  ``.ukdb``.  DbId is the processor name (``gfx1030``).
* Directory (MIOpen's ``ComputeUserCachePath``): ``~/.cache/miopen/<version>``
  where version is ``MAJOR.MINOR.PATCH.TWEAK`` of the MIOpen that runs.
  ``MIOPEN_CUSTOM_CACHE_DIR`` replaces ``~/.cache/miopen/<version>`` up to
  MIOpen 3.4 and replaces only ``~/.cache/miopen`` from 3.5 on (the version
  is appended).
* ``~`` (MIOpen's ``ExpandUser``, src/expanduser.cpp): EVERY ``~`` in the
  path string, also in ``MIOPEN_CUSTOM_CACHE_DIR``, is replaced by the home
  directory: ``$HOME``, unless it is unset, empty or exactly ``/``; then
  ``std::filesystem::temp_directory_path()`` (:func:`temp_directory_path`).
  Never the passwd entry (Python's ``os.path.expanduser`` falls back to it;
  MIOpen does not).
* Networked home (MIOpen >= 2.20, ``IsNetworkedFilesystem``): when the
  first existing ancestor of ``~/.cache/miopen/<version>`` is on NFS,
  SMB/CIFS, Coda, OCFS2, AFS, Lustre or Ceph (``statfs`` ``f_type``), MIOpen
  uses ``temp_directory_path()`` itself, with no version directory.  Not for
  ``MIOPEN_CUSTOM_CACHE_DIR``.
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


# --- MIOpen's home directory and file-system check (src/expanduser.cpp) -------------

#: Where ``std::filesystem::temp_directory_path()`` looks, in order (libstdc++:
#: the first that is set, even to "", wins; else ``/tmp``).
TEMP_DIR_VARS = ("TMPDIR", "TMP", "TEMP", "TEMPDIR")
#: First MIOpen version that leaves a networked home for the temporary directory.
NETWORK_CHECK_VERSION = (2, 20)
#: ``statfs`` f_type values MIOpen's ``IsNetworked`` treats as networked (linux/magic.h,
#: MIOpen's own defines for the rest), with the names MIOpen logs.
NETWORKED_FS_TYPES = {
    0x6969: "NFS", 0x517B: "SMB", 0xFE534D42: "SMB2", 0xFF534D42: "CIFS", 0x73757245: "Coda",
    0x7461636F: "OCFS2", 0x5346414F: "AFS", 0x0BD00BD0: "Lustre", 0x00C36400: "Ceph",
}
#: How many parents MIOpen walks up to find an existing directory to ``statfs``.
_ANCESTOR_STEPS = 32


def temp_directory_path(env: Mapping[str, str]) -> tuple[str, str]:
    """(path, why) of libstdc++'s ``std::filesystem::temp_directory_path()``
    under ``env``: the first of TMPDIR, TMP, TEMP, TEMPDIR that is set (an
    empty value counts as set), else ``/tmp``.  libstdc++ throws when that
    is not a directory (MIOpen then cannot start), and a relative path means
    a directory relative to the working directory of whatever program loads
    MIOpen: both are UsageErrors asking for ``--out-dir``."""
    name = next((n for n in TEMP_DIR_VARS if n in env), None)
    path = env[name] if name else "/tmp"
    what = f"{name}={path!r}" if name else "/tmp (TMPDIR, TMP, TEMP, TEMPDIR unset)"
    if not os.path.isabs(path):
        raise UsageError(f"MIOpen would use the temporary directory {what}, which is not an absolute path "
                         "(std::filesystem::temp_directory_path() fails on \"\", and a relative one depends on "
                         "the working directory of the program that runs MIOpen); pass --out-dir DIR")
    if not os.path.isdir(path):
        raise UsageError(f"MIOpen would use the temporary directory {what}, which is not a directory "
                         "(std::filesystem::temp_directory_path() throws, MIOpen cannot start); pass --out-dir DIR")
    return path, what


def home_dir(env: Mapping[str, str]) -> tuple[str, str]:
    """(home, why): what MIOpen's ``ExpandUser`` puts for ``~``: ``$HOME``
    unless it is unset, empty or ``/``, else :func:`temp_directory_path`."""
    home = env.get("HOME")
    if home is not None and home not in ("", "/"):
        return home, ""
    state = "unset" if home is None else f"{home!r}"
    tmp, what = temp_directory_path(env)
    return tmp, f"HOME is {state}, so MIOpen uses the temporary directory {what} for ~"


def expand_user(path: str, home: str) -> str:
    """MIOpen's ``ExpandUser``: every ``~`` in ``path`` replaced by ``home``
    (not only a leading one)."""
    return path.replace("~", home)


def _tidy(path: str) -> str:
    """``path`` with repeated and trailing slashes dropped (the same file for
    the kernel; ``..`` is kept: it depends on symbolic links)."""
    path = re.sub(r"/{2,}", "/", path)
    return path.rstrip("/") or "/"


def fs_type(path: str) -> int | None:
    """``statfs(path).f_type`` (the file-system magic MIOpen checks), or None
    when statfs fails (MIOpen then treats the file system as local)."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        statfs = libc.statfs
    except (OSError, AttributeError):
        return None
    buf = ctypes.create_string_buffer(512)  # struct statfs: 120 bytes on 64-bit Linux
    if statfs(os.fsencode(path), buf) != 0:
        return None
    # f_type is the first member, a __fsword_t (long) on Linux; the magics are 32-bit values
    return ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF


def networked_fs(path: str, fs_type_of=fs_type) -> tuple[str, int] | None:
    """(the directory checked, its f_type) when MIOpen's
    ``IsNetworkedFilesystem(path)`` is true: the first existing ancestor of
    ``path`` (at most 32 steps up) is on a file system of
    :data:`NETWORKED_FS_TYPES`; else None."""
    p = path
    for _ in range(_ANCESTOR_STEPS):
        if os.path.exists(p):
            break
        p = os.path.dirname(p)
    t = fs_type_of(p)
    return (p, t) if t in NETWORKED_FS_TYPES else None


def resolve_cache_dir(env: Mapping[str, str], *, rocm_roots: Iterable[str] = DEFAULT_ROCM_ROOTS,
                      fs_type_of=fs_type) -> CacheDir:
    """MIOpen's user cache directory under the environment ``env`` (see the
    module doc); UsageError asking for ``--out-dir`` when it cannot be known.

    Candidates are the installed MIOpen versions (``version.h``) and the
    version directories already in ``~/.cache/miopen`` (an MIOpen shipped
    inside e.g. a PyTorch wheel has no version.h, but creates its directory
    when it runs); the newest wins.  ``fs_type_of(path)`` gives a
    directory's statfs f_type (a test hook)."""
    installed = installed_versions(rocm_roots)
    custom = env.get("MIOPEN_CUSTOM_CACHE_DIR", "")
    home, home_why = home_dir(env)  # MIOpen works it out on its first ExpandUser, whatever the path
    prefix = f"{home_why}; " if home_why and (not custom or "~" in custom) else ""
    if custom:
        expanded = _tidy(expand_user(custom, home))
        if not os.path.isabs(expanded):
            raise UsageError(f"MIOPEN_CUSTOM_CACHE_DIR={custom!r} is the relative path {expanded}: MIOpen takes it "
                             "relative to the working directory of the program that runs it; pass --out-dir DIR")
        got = _custom_dir(expanded, _newest(installed) if installed else None)
        return CacheDir(got.path, prefix + got.why)
    root = _tidy(expand_user(DEFAULT_CACHE_ROOT, home))
    if not os.path.isabs(root):
        raise UsageError(f"HOME={home!r} is a relative path: MIOpen would take {root} relative to the working "
                         "directory of the program that runs it; pass --out-dir DIR")
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
    why = f"{prefix}newest MIOpen: {source}{more}"
    if v.numbers[:2] >= NETWORK_CHECK_VERSION and (net := networked_fs(path, fs_type_of)) is not None:
        checked, magic = net
        tmp, what = temp_directory_path(env)
        return CacheDir(_tidy(tmp), f"{why}; but {checked} is on a networked file system "
                                    f"({NETWORKED_FS_TYPES[magic]}, statfs f_type 0x{magic:x}), so MIOpen "
                                    f"{'.'.join(map(str, NETWORK_CHECK_VERSION))}+ uses the temporary directory "
                                    f"{what} instead, without a version directory")
    return CacheDir(path, why)


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
