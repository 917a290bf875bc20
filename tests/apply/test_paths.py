"""MIOpen's DB file names and user cache directory, and where kpatch refuses to write."""

from __future__ import annotations

import os

import pytest

from kpatch.errors import UsageError
from kpatch.miopen.paths import (
    MiopenVersion, check_output_dir, db_basename, read_version_header, resolve_cache_dir, user_db_name)


@pytest.mark.parametrize("db_id, cu, name", [
    # names observed in the wild (miopen-kdb.md): decimal with '_' up to 64 ...
    ("gfx1030", 18, "gfx1030_18"), ("gfx1030", 20, "gfx1030_20"), ("gfx1030", 40, "gfx1030_40"),
    ("gfx1010", 64, "gfx1010_64"),
    # ... lowercase hex without '_' above 64: 0x6e = 110, 0x78 = 120, 0x41 = 65
    ("gfx90a", 110, "gfx90a6e"), ("gfx908", 120, "gfx90878"), ("gfx1030", 65, "gfx103041"),
])
def test_db_basename_follows_miopen(db_id, cu, name):
    assert db_basename(db_id, cu) == name
    assert user_db_name(db_id, cu) == name + ".ukdb"


def test_db_basename_rejects_nonpositive():
    with pytest.raises(UsageError):
        db_basename("gfx1030", 0)


def write_header(root: str, version: str) -> str:
    major, minor, patch, tweak = version.split(".")
    d = os.path.join(root, "include", "miopen")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "version.h")
    with open(path, "w") as f:
        f.write("#pragma once\n")
        for k, v in (("MAJOR", major), ("MINOR", minor), ("PATCH", patch), ("TWEAK", tweak)):
            f.write(f"#define MIOPEN_VERSION_{k} {v}\n")
    return path


def test_version_header(tmp_path):
    path = write_header(str(tmp_path), "3.2.0.9a24e9ec")
    assert read_version_header(path) == MiopenVersion(3, 2, 0, "9a24e9ec")
    assert str(read_version_header(path)) == "3.2.0.9a24e9ec"
    (tmp_path / "junk.h").write_text("#define MIOPEN_VERSION_MAJOR 3\n")
    assert read_version_header(str(tmp_path / "junk.h")) is None


def test_cache_dir_picks_newest_existing_version_dir(tmp_path):
    home = tmp_path / "home"
    for v in ("2.19.0.abc", "3.2.0.def", "3.1.0.x"):
        (home / ".cache" / "miopen" / v).mkdir(parents=True)
    (home / ".cache" / "miopen" / "not-a-version").mkdir()
    got = resolve_cache_dir({"HOME": str(home)}, rocm_roots=[str(tmp_path / "none")])
    assert got.path == str(home / ".cache" / "miopen" / "3.2.0.def")
    assert "3.2.0.def" in got.why and "2.19.0.abc" in got.why  # says which, and what else it saw


def test_cache_dir_numeric_not_lexical(tmp_path):
    home = tmp_path / "home"
    for v in ("3.9.0.a", "3.10.0.b"):
        (home / ".cache" / "miopen" / v).mkdir(parents=True)
    got = resolve_cache_dir({"HOME": str(home)}, rocm_roots=[])
    assert got.path.endswith("3.10.0.b")


def test_cache_dir_from_installed_version_h(tmp_path):
    home = tmp_path / "home"
    (home / ".cache" / "miopen" / "3.1.0.old").mkdir(parents=True)
    rocm = tmp_path / "opt" / "rocm-6.2.0"
    header = write_header(str(rocm), "3.2.0.new")
    got = resolve_cache_dir({"HOME": str(home)}, rocm_roots=[str(tmp_path / "opt" / "rocm-*")])
    assert got.path == str(home / ".cache" / "miopen" / "3.2.0.new")
    assert header in got.why


def test_custom_cache_dir_before_and_after_3_5(tmp_path):
    custom = tmp_path / "custom"
    custom.mkdir()
    old = tmp_path / "old"
    write_header(str(old), "3.3.0.aaa")
    got = resolve_cache_dir({"MIOPEN_CUSTOM_CACHE_DIR": str(custom), "HOME": str(tmp_path)}, rocm_roots=[str(old)])
    assert got.path == str(custom)  # MIOpen <= 3.4 uses it as is
    new = tmp_path / "new"
    write_header(str(new), "3.5.1.dabb6df2b9")
    got = resolve_cache_dir({"MIOPEN_CUSTOM_CACHE_DIR": str(custom), "HOME": str(tmp_path)}, rocm_roots=[str(new)])
    assert got.path == str(custom / "3.5.1.dabb6df2b9")  # 3.5+ appends the version


def test_custom_cache_dir_without_version_h(tmp_path):
    custom = tmp_path / "custom"
    custom.mkdir()
    with pytest.raises(UsageError, match="--out-dir"):
        resolve_cache_dir({"MIOPEN_CUSTOM_CACHE_DIR": str(custom), "HOME": str(tmp_path)}, rocm_roots=[])
    (custom / "gfx1030_18.ukdb").write_bytes(b"")
    assert resolve_cache_dir({"MIOPEN_CUSTOM_CACHE_DIR": str(custom), "HOME": str(tmp_path)},
                             rocm_roots=[]).path == str(custom)
    (custom / "3.5.0.abc").mkdir()
    assert resolve_cache_dir({"MIOPEN_CUSTOM_CACHE_DIR": str(custom), "HOME": str(tmp_path)},
                             rocm_roots=[]).path == str(custom / "3.5.0.abc")


def test_cache_dir_unknown_asks_for_out_dir(tmp_path):
    with pytest.raises(UsageError, match="--out-dir"):
        resolve_cache_dir({"HOME": str(tmp_path)}, rocm_roots=[str(tmp_path / "none")])


@pytest.mark.parametrize("path", ["/usr/lib", "/usr/share/miopen/db", "/opt/rocm/share/miopen/db", "/opt", "/etc"])
def test_system_directories_refused(path):
    with pytest.raises(UsageError, match="system directory"):
        check_output_dir(path)


def test_symlink_into_system_directory_refused(tmp_path):
    link = tmp_path / "sneaky"
    link.symlink_to("/usr/share")
    with pytest.raises(UsageError, match="system directory"):
        check_output_dir(str(link))


def test_directory_of_source_system_db_refused(tmp_path):
    src = tmp_path / "gfx1030.kdb"
    src.write_bytes(b"")
    with pytest.raises(UsageError, match="system kernel DB"):
        check_output_dir(str(tmp_path), [str(src)])


def test_missing_directory_created_only_when_asked(tmp_path):
    target = tmp_path / "a" / "b"
    assert check_output_dir(str(target)) == str(target)
    assert not target.exists()
    check_output_dir(str(target), create=True)
    assert target.is_dir()


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_unwritable_directory_refused(tmp_path):
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o500)
    try:
        with pytest.raises(UsageError, match="not writable"):
            check_output_dir(str(d))
    finally:
        d.chmod(0o700)


# --- ~ and the temporary directory, as MIOpen's ExpandUser resolves them ------------------

CXX_TEMP_DIR = """#include <filesystem>
#include <iostream>
int main() {
  try { std::cout << std::filesystem::temp_directory_path().string(); }
  catch (const std::exception&) { std::cout << "THROWS"; }
}
"""


@pytest.fixture(scope="module")
def libstdcxx_temp_dir(tmp_path_factory):
    """A program printing libstdc++'s std::filesystem::temp_directory_path() (the oracle)."""
    import shutil
    import subprocess

    if shutil.which("g++") is None:
        pytest.skip("g++ not installed: no libstdc++ oracle")
    d = tmp_path_factory.mktemp("cxx")
    (d / "t.cpp").write_text(CXX_TEMP_DIR)
    subprocess.run(["g++", "-std=c++17", "-o", str(d / "t"), str(d / "t.cpp")], check=True, capture_output=True)

    def run(env: dict, cwd: str) -> str:
        return subprocess.run([str(d / "t")], env=env, cwd=cwd, capture_output=True, text=True, check=True).stdout

    return run


def test_temp_directory_path_agrees_with_libstdcxx(tmp_path, libstdcxx_temp_dir):
    from kpatch.miopen.paths import temp_directory_path

    d1, d2, afile = tmp_path / "d1", tmp_path / "d2", tmp_path / "afile"
    d1.mkdir(), d2.mkdir(), afile.write_bytes(b"")
    (tmp_path / "rel").mkdir()
    cases = [{}, {"TMPDIR": str(d1)}, {"TMP": str(d2)}, {"TEMP": str(d1)}, {"TEMPDIR": str(d2)},
             {"TMPDIR": str(d1), "TMP": str(d2)}, {"TMP": str(d2), "TEMPDIR": str(d1)},
             {"TMPDIR": "", "TMP": str(d2)},  # set but empty still wins, and is no directory
             {"TMPDIR": str(afile), "TMP": str(d2)}, {"TMPDIR": str(tmp_path / "missing")},
             {"TMPDIR": str(d1) + "/"}, {"TMPDIR": "rel"}, {"TMPDIR": "~"}]
    for env in cases:
        want = libstdcxx_temp_dir(env, str(tmp_path))
        if want == "THROWS" or not want.startswith("/"):  # relative: depends on MIOpen's caller's cwd
            with pytest.raises(UsageError, match="--out-dir"):
                temp_directory_path(env)
        else:
            assert temp_directory_path(env)[0] == want, env


@pytest.mark.parametrize("home", [None, "", "/"])
def test_home_unset_empty_or_root_means_temp_dir(tmp_path, home):
    rocm = tmp_path / "rocm"
    write_header(str(rocm), "3.3.0.abc")
    tmp = tmp_path / "t"
    tmp.mkdir()
    env = {"TMPDIR": str(tmp)} | ({} if home is None else {"HOME": home})
    got = resolve_cache_dir(env, rocm_roots=[str(rocm)])
    assert got.path == f"{tmp}/.cache/miopen/3.3.0.abc"
    assert ("HOME is unset" if home is None else f"HOME is {home!r}") in got.why and "TMPDIR" in got.why
    env.pop("TMPDIR")  # no TMPDIR, TMP, TEMP, TEMPDIR: /tmp (never the passwd entry's home)
    assert resolve_cache_dir(env, rocm_roots=[str(rocm)]).path == "/tmp/.cache/miopen/3.3.0.abc"


def test_home_fallback_to_a_temp_dir_that_is_no_directory_is_refused(tmp_path):
    rocm = tmp_path / "rocm"
    write_header(str(rocm), "3.3.0.abc")
    (tmp_path / "afile").write_bytes(b"")
    for env in ({"TMPDIR": str(tmp_path / "afile")}, {"HOME": "/", "TMPDIR": ""}, {"TMP": "relative"}):
        with pytest.raises(UsageError, match="--out-dir"):
            resolve_cache_dir(env, rocm_roots=[str(rocm)])


def test_home_set_is_used_as_is(tmp_path):
    rocm = tmp_path / "rocm"
    write_header(str(rocm), "3.3.0.abc")
    got = resolve_cache_dir({"HOME": str(tmp_path / "h") + "/", "TMPDIR": "/nonexistent"}, rocm_roots=[str(rocm)])
    assert got.path == f"{tmp_path}/h/.cache/miopen/3.3.0.abc"  # TMPDIR is not consulted
    with pytest.raises(UsageError, match="relative"):
        resolve_cache_dir({"HOME": "h"}, rocm_roots=[str(rocm)])


def test_every_tilde_in_custom_cache_dir_is_replaced(tmp_path):
    old = tmp_path / "old"
    write_header(str(old), "3.3.0.aaa")
    home = tmp_path / "h"
    env = {"HOME": str(home), "MIOPEN_CUSTOM_CACHE_DIR": "~/cache~x/~"}
    got = resolve_cache_dir(env, rocm_roots=[str(old)])
    # ReplaceString: all of them, not only a leading one ("//" is "/" to the kernel)
    assert got.path == f"{home}/cache{home}x/{home}".replace("//", "/")
    tmp = tmp_path / "t"
    tmp.mkdir()
    got = resolve_cache_dir({"MIOPEN_CUSTOM_CACHE_DIR": "~/c~", "TMPDIR": str(tmp)}, rocm_roots=[str(old)])
    assert got.path == f"{tmp}/c{tmp}" and "HOME is unset" in got.why
    new = tmp_path / "new"
    write_header(str(new), "3.5.1.bbb")
    got = resolve_cache_dir({"HOME": str(home), "MIOPEN_CUSTOM_CACHE_DIR": "~/c~"}, rocm_roots=[str(new)])
    assert got.path == f"{home}/c{home}/3.5.1.bbb"
    with pytest.raises(UsageError, match="relative"):
        resolve_cache_dir({"HOME": str(home), "MIOPEN_CUSTOM_CACHE_DIR": "cache"}, rocm_roots=[str(old)])


def test_fs_type_is_statfs_f_type():
    """Oracle: coreutils `stat -f -c %t` prints statfs's f_type in hex."""
    import subprocess

    from kpatch.miopen.paths import fs_type

    for path in ("/", "/proc", "/dev/shm", "/tmp"):
        if not os.path.isdir(path):
            continue
        want = int(subprocess.run(["stat", "-f", "-c", "%t", path], capture_output=True, text=True,
                                  check=True).stdout, 16)
        assert fs_type(path) == want, path
    assert fs_type("/nonexistent/kpatch") is None


def test_networked_home_means_temp_dir_without_version(tmp_path):
    home = tmp_path / "nfs-home"
    home.mkdir()
    tmp = tmp_path / "t"
    tmp.mkdir()
    rocm = tmp_path / "rocm"
    write_header(str(rocm), "3.3.0.abc")
    seen = []

    def nfs_under_home(path):  # the home is on NFS (0x6969), everything else local (ext4)
        seen.append(path)
        return 0x6969 if path == str(home) or path.startswith(str(home) + "/") else 0xEF53

    env = {"HOME": str(home), "TMPDIR": str(tmp)}
    got = resolve_cache_dir(env, rocm_roots=[str(rocm)], fs_type_of=nfs_under_home)
    assert got.path == str(tmp) and "networked" in got.why and "NFS" in got.why
    assert seen == [str(home)]  # the first existing ancestor of ~/.cache/miopen/3.3.0.abc is checked
    got = resolve_cache_dir({"HOME": str(tmp_path / "local"), "TMPDIR": str(tmp)}, rocm_roots=[str(rocm)],
                            fs_type_of=nfs_under_home)
    assert got.path == f"{tmp_path}/local/.cache/miopen/3.3.0.abc"
    old = tmp_path / "old"  # MIOpen before 2.20 had no such check
    write_header(str(old), "2.19.0.x")
    got = resolve_cache_dir(env, rocm_roots=[str(old)], fs_type_of=nfs_under_home)
    assert got.path == f"{home}/.cache/miopen/2.19.0.x"
    got = resolve_cache_dir(env | {"MIOPEN_CUSTOM_CACHE_DIR": str(home / "c")}, rocm_roots=[str(rocm)],
                            fs_type_of=nfs_under_home)
    assert got.path == f"{home}/c"  # a custom directory is used even on NFS


def test_apply_with_home_unset_writes_where_miopen_looks(tmp_path):
    """End to end: HOME unset -> $TMPDIR/.cache/miopen/<version>/, never the passwd entry's home."""
    import pwd
    import subprocess
    import sys

    rocm = tmp_path / "rocm"
    tweak = f"kpatchtest{os.getpid()}"
    write_header(str(rocm), f"3.3.0.{tweak}")
    tmp = tmp_path / "t"
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("HOME", "TMP", "TEMP", "TEMPDIR", "MIOPEN_CUSTOM_CACHE_DIR", "HSA_OVERRIDE_GFX_VERSION")}
    env |= {"TMPDIR": str(tmp), "KPATCH_ROCM_ROOTS": str(rocm), "KPATCH_NO_PROGRESS": "1"}
    wrong = os.path.join(pwd.getpwuid(os.getuid()).pw_dir, ".cache", "miopen", f"3.3.0.{tweak}")
    parent_existed = os.path.isdir(os.path.dirname(wrong))
    try:
        p = subprocess.run([sys.executable, "-m", "kpatch", "apply", "--db", "@sample", "--mode", "override",
                            "--cu", "18"], env=env, capture_output=True, text=True, timeout=300)
        assert not os.path.exists(wrong)  # Python's expanduser would pick the passwd entry's home
    finally:
        if os.path.isdir(wrong):  # do not leave a broken run's output in the real home
            import shutil

            shutil.rmtree(wrong)
            if not parent_existed:
                os.rmdir(os.path.dirname(wrong))
    assert p.returncode == 0, p.stderr
    want = tmp / ".cache" / "miopen" / f"3.3.0.{tweak}" / "gfx1030_18.ukdb"
    assert want.is_file() and f"output {want} (HOME is unset" in p.stdout
    p = subprocess.run([sys.executable, "-m", "kpatch", "revert"], env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0 and f"{want} holds 0 rows" in p.stdout, p.stderr
