"""Shared test helpers: paths to fixtures and the corpus, and running the CLI."""

from __future__ import annotations

import re
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "bin")
#: rocBLAS' Tensile library of Debian unstable's librocblas (tools/fetch_sid.sh)
ROCBLAS_LIBRARY = os.path.join(ROOT, "kdb_cache", "sid-root", "usr", "lib", "x86_64-linux-gnu", "rocblas", "4.4.1",
                               "library")
CORPUS_LIB = os.path.join(ROOT, "kdb_cache", "root", "usr", "lib", "x86_64-linux-gnu")
LIBROCRAND = os.path.join(CORPUS_LIB, "librocrand.so.1.1")


def run_kpatch(*args: str, cwd: str | None = None, env: dict | None = None,
               timeout: float = 600) -> subprocess.CompletedProcess:
    """Run `python -m kpatch ARGS` as a user would; return the completed process (text)."""
    e = dict(os.environ)
    e.pop("KPATCH_DEBUG", None)
    e["KPATCH_NO_PROGRESS"] = "1"
    if env:
        e.update(env)
    return subprocess.run(
        [sys.executable, "-m", "kpatch", *args], capture_output=True, text=True, cwd=cwd, env=e, timeout=timeout
    )


def kpatch_in_process(*args: str, cwd: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    """:func:`run_kpatch`, but inside this process: the command's own
    ``main()`` (so its exit status and error lines are the command's), with
    the same environment (``env``: variables to set, or with None to unset)
    and working directory, stdout and stderr captured.
    For tests that check only what kpatch prints and returns: no interpreter
    start-up per call."""
    import contextlib
    import io

    from kpatch.cli.main import main

    e = dict(os.environ)
    e.pop("KPATCH_DEBUG", None)
    e["KPATCH_NO_PROGRESS"] = "1"
    for k, v in (env or {}).items():  # a value None: the variable is unset
        if v is None:
            e.pop(k, None)
        else:
            e[k] = v
    saved_env, saved_argv, saved_cwd = dict(os.environ), sys.argv, os.getcwd()
    out, err = io.StringIO(), io.StringIO()
    try:
        os.environ.clear()
        os.environ.update(e)
        if cwd:
            os.chdir(cwd)
        sys.argv = ["kpatch", *args]
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main()
                code = 0
            except SystemExit as x:
                code = x.code if isinstance(x.code, int) else (0 if x.code is None else 1)
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        sys.argv = saved_argv
        os.chdir(saved_cwd)
    return subprocess.CompletedProcess(["kpatch", *args], code, out.getvalue(), err.getvalue())


def need_tool(name: str) -> str:
    path = shutil.which(name) or (name if os.path.exists(name) else None)
    if not path:
        pytest.skip(f"{name} is not installed")
    return path


@pytest.fixture
def librocrand() -> str:
    if not os.path.exists(LIBROCRAND):
        pytest.skip("corpus not fetched (tools/fetch_corpus.sh)")
    return LIBROCRAND


_OBJDUMP_LINE = re.compile(r"^\t(.*?)\s*// ([0-9A-F]+):")


def gfx1030_code_objects(path: str) -> list:
    """The gfx1030 code objects (CodeObject) of the fat binaries of the host
    library ``path``, in bundle order."""
    from kpatch.codeobject import CodeObject
    from kpatch.containers.bundle import open_bundle_bytes
    from kpatch.containers.hostelf import find_fatbin_bundles
    out = []
    with open(path, "rb") as fh:
        for b in find_fatbin_bundles(path):
            fh.seek(b.offset)
            _, bundle, entries = open_bundle_bytes(fh.read(b.size))
            out += [CodeObject.from_bytes(bytes(e.data(bundle))) for e in entries if e.id.endswith("gfx1030")]
    return out


def fixture_and_corpus_objects() -> list:
    """The gfx1030 fixture mathops.hip.gfx1030.v5.hsaco and, when the corpus
    is fetched, librocrand's gfx1030 code object(s) (as CodeObjects)."""
    from kpatch.codeobject import CodeObject
    with open(os.path.join(FIXTURES, "mathops.hip.gfx1030.v5.hsaco"), "rb") as fh:
        objs = [CodeObject.from_bytes(fh.read())]
    if os.path.exists(LIBROCRAND):
        objs += gfx1030_code_objects(LIBROCRAND)
    return objs


def objdump_functions(data: bytes, tmp_path, mcpu: str = "gfx1030") -> dict[str, list[str]]:
    """llvm-objdump-16's instruction text per function symbol of the code
    object ``data`` (the independent decoder), as ``--mcpu`` reads it."""
    need_tool("llvm-objdump-16")
    p = tmp_path / f"objdump-{mcpu}.co"
    p.write_bytes(data)
    out = subprocess.run(["llvm-objdump-16", "-d", f"--mcpu={mcpu}", str(p)], capture_output=True, text=True,
                         check=True).stdout
    funcs: dict[str, list[str]] = {}
    cur = None
    for line in out.splitlines():
        m = re.match(r"^[0-9a-f]+ <(.*)>:$", line)
        if m:
            cur = funcs.setdefault(m.group(1), [])
        elif (m := _OBJDUMP_LINE.match(line)) and cur is not None:
            cur.append(m.group(1))
    return funcs
