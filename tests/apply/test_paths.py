"""MIOpen's DB file names and user cache directory, and where kpatch refuses to write."""

from __future__ import annotations

import os

import pytest

from kpatch.errors import UsageError
from kpatch.outputs.miopen_paths import (
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
    got = resolve_cache_dir({}, home=str(home), rocm_roots=[str(tmp_path / "none")])
    assert got.path == str(home / ".cache" / "miopen" / "3.2.0.def")
    assert "3.2.0.def" in got.why and "2.19.0.abc" in got.why  # says which, and what else it saw


def test_cache_dir_numeric_not_lexical(tmp_path):
    home = tmp_path / "home"
    for v in ("3.9.0.a", "3.10.0.b"):
        (home / ".cache" / "miopen" / v).mkdir(parents=True)
    got = resolve_cache_dir({}, home=str(home), rocm_roots=[])
    assert got.path.endswith("3.10.0.b")


def test_cache_dir_from_installed_version_h(tmp_path):
    home = tmp_path / "home"
    (home / ".cache" / "miopen" / "3.1.0.old").mkdir(parents=True)
    rocm = tmp_path / "opt" / "rocm-6.2.0"
    header = write_header(str(rocm), "3.2.0.new")
    got = resolve_cache_dir({}, home=str(home), rocm_roots=[str(tmp_path / "opt" / "rocm-*")])
    assert got.path == str(home / ".cache" / "miopen" / "3.2.0.new")
    assert header in got.why


def test_custom_cache_dir_before_and_after_3_5(tmp_path):
    custom = tmp_path / "custom"
    custom.mkdir()
    old = tmp_path / "old"
    write_header(str(old), "3.3.0.aaa")
    got = resolve_cache_dir({"MIOPEN_CUSTOM_CACHE_DIR": str(custom)}, home=str(tmp_path), rocm_roots=[str(old)])
    assert got.path == str(custom)  # MIOpen <= 3.4 uses it as is
    new = tmp_path / "new"
    write_header(str(new), "3.5.1.dabb6df2b9")
    got = resolve_cache_dir({"MIOPEN_CUSTOM_CACHE_DIR": str(custom)}, home=str(tmp_path), rocm_roots=[str(new)])
    assert got.path == str(custom / "3.5.1.dabb6df2b9")  # 3.5+ appends the version


def test_custom_cache_dir_without_version_h(tmp_path):
    custom = tmp_path / "custom"
    custom.mkdir()
    with pytest.raises(UsageError, match="--out-dir"):
        resolve_cache_dir({"MIOPEN_CUSTOM_CACHE_DIR": str(custom)}, home=str(tmp_path), rocm_roots=[])
    (custom / "gfx1030_18.ukdb").write_bytes(b"")
    assert resolve_cache_dir({"MIOPEN_CUSTOM_CACHE_DIR": str(custom)}, home=str(tmp_path),
                             rocm_roots=[]).path == str(custom)
    (custom / "3.5.0.abc").mkdir()
    assert resolve_cache_dir({"MIOPEN_CUSTOM_CACHE_DIR": str(custom)}, home=str(tmp_path),
                             rocm_roots=[]).path == str(custom / "3.5.0.abc")


def test_cache_dir_unknown_asks_for_out_dir(tmp_path):
    with pytest.raises(UsageError, match="--out-dir"):
        resolve_cache_dir({}, home=str(tmp_path), rocm_roots=[str(tmp_path / "none")])


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
