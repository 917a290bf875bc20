"""Every exit status README's "Exit status and errors" documents is what a
command returns in that situation (run as a user runs it: `python -m
kpatch`), and `kpatch --help` documents the same statuses."""

from __future__ import annotations

import os
import re
import sys

import pytest

from conftest import FIXTURES, ROOT, run_kpatch
from kpatch.data import sample_db_path

HSACO = os.path.join(FIXTURES, "miopen_like.cl.gfx1030.v4.hsaco")
OTHER = os.path.join(FIXTURES, "miopen_like.cl.gfx1030.v5.hsaco")


def readme_statuses() -> list[int]:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    section = text.split("### Exit status and errors", 1)[1].split("\n## ", 1)[0]
    return [int(m) for m in re.findall(r"^\| `(\d+)` \|", section, re.M)]


def test_help_documents_the_statuses_readme_documents():
    statuses = readme_statuses()
    assert statuses == [0, 1, 2, 3, 130]
    p = run_kpatch("--help")
    assert p.returncode == 0
    block = p.stdout.split("Exit status (every command):", 1)[1]
    assert [int(m) for m in re.findall(r"^\s+(\d+)\s{2,}", block, re.M)] == statuses


def one_error_line(p) -> None:
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("error: ") and "Traceback" not in p.stderr, p.stderr


def test_status_0(tmp_path):
    for args in (("scan", "@sample"), ("scan", "--target", "gfx1010", "@sample"), ("explain", "H002"),
                 ("rules",), ("diff", HSACO, HSACO), ("disasm", HSACO),
                 ("extract", HSACO, "-o", str(tmp_path / "x.co"))):
        p = run_kpatch(*args)
        assert p.returncode == 0, (args, p.stderr)


def test_status_1_input_cannot_be_read(tmp_path):
    missing = str(tmp_path / "missing.co")
    bad_rules = tmp_path / "bad.toml"
    bad_rules.write_text("x = [")
    binary_rules = tmp_path / "binary.toml"  # (not UTF-8: it was an internal error)
    binary_rules.write_bytes(b"\xff\xfe[set]\n")
    dangling = tmp_path / "dangling.co"  # (missing too: it was exit 2)
    dangling.symlink_to(tmp_path / "nowhere.co")
    env = {"KPATCH_SYSFS_ROOT": str(tmp_path)}
    for args in (("scan", missing), ("disasm", missing), ("diff", HSACO, missing), ("diff", missing, HSACO),
                 ("extract", missing, "-o", str(tmp_path / "o")),
                 ("extract", f"kdb://{sample_db_path()}?name=nope&args=x", "-o", str(tmp_path / "o")),
                 ("apply", missing, "-o", str(tmp_path / "o"), "--mode", "override"),
                 ("apply", str(dangling), "-o", str(tmp_path / "o"), "--mode", "override"),
                 ("apply", "--db", missing, "--mode", "override", "--cu", "18", "--out-dir", str(tmp_path / "c")),
                 ("rules", "--rules", str(bad_rules)), ("rules", "--rules", str(binary_rules))):
        p = run_kpatch(*args, env=env)
        assert p.returncode == 1, (args, p.stderr)
        assert p.stderr.startswith("error: ") and "Traceback" not in p.stderr, (args, p.stderr)
    assert not (tmp_path / "o").exists()


def test_status_1_checks_that_failed():
    p = run_kpatch("diff", "--exit-code", HSACO, OTHER)
    assert p.returncode == 1 and p.stderr == ""
    p = run_kpatch("diff", "--exit-code", HSACO, HSACO)
    assert p.returncode == 0
    p = run_kpatch("disasm", "--kernel", "no_such_kernel", HSACO)
    assert p.returncode == 1
    one_error_line(p)


def test_status_2_usage(tmp_path):
    exists = tmp_path / "exists.co"
    exists.write_bytes(b"keep")
    env = {"KPATCH_SYSFS_ROOT": str(tmp_path)}  # no GPU: the mode cannot be detected
    cases = [
        ("scan", "--no-such-option"), ("diff", HSACO), ("explain", "NoSuchClass"), ("rules", "no-such-rule"),
        ("extract", "bogus://x", "-o", str(tmp_path / "o")),
        ("extract", HSACO, "-o", str(exists)),
        ("apply", sample_db_path(), "-o", str(tmp_path / "o"), "--mode", "override"),  # a DB is for --db
        ("apply", "--db", "@sample", "--cu", "18", "--out-dir", str(tmp_path / "c")),  # mode unknown
        ("apply", "--db", "@sample", "--mode", "override", "--cu", "18", "--out-dir", "/usr/lib/kpatch-never"),
        ("revert", str(tmp_path / "gfx1030_18.ukdb")),  # no backup
        ("verify", "--emulate", HSACO, OTHER, "--seed", "-1"),  # (it was an internal error)
    ]
    for args in cases:
        p = run_kpatch(*args, env=env)
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        assert "Traceback" not in p.stderr
    assert exists.read_bytes() == b"keep" and not (tmp_path / "o").exists() and not (tmp_path / "c").exists()


def run_main(monkeypatch, capsys, args: list[str]) -> tuple[int, str]:
    from kpatch.cli import main as main_mod

    monkeypatch.setattr(sys, "argv", ["kpatch", *args])
    monkeypatch.delenv("KPATCH_DEBUG", raising=False)
    with pytest.raises(SystemExit) as e:
        main_mod.main()
    return e.value.code, capsys.readouterr().err


@pytest.mark.parametrize("raised, status", [(RuntimeError("boom"), 3), (KeyboardInterrupt(), 130)])
def test_status_3_and_130(monkeypatch, capsys, raised, status):
    import kpatch.cli.scan as scan_mod

    def broken(*a, **k):
        raise raised

    monkeypatch.setattr(scan_mod, "run_scan", broken)
    code, err = run_main(monkeypatch, capsys, ["scan", HSACO])
    assert code == status
    err = err.lstrip("\n")  # click ends the line the terminal's ^C was echoed on
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err
    if status == 3:
        assert "internal error: RuntimeError: boom" in err
