"""SIGKILL at every moment of apply's and revert's write leaves a sound DB.

A child process runs apply (or revert) on a user DB, with the write path
instrumented to print a marker and wait at each moment: before the write
transaction, after the backup, after the first row, after the last row
(before COMMIT), after COMMIT.  The parent kills it with SIGKILL at that
marker and checks with sqlite3 alone: ``PRAGMA integrity_check`` is ok and
the rows are exactly those before the write (killed before COMMIT) or
exactly those after it (killed after), never a mix.  Then a normal apply /
revert still works on that DB.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from kpatch.containers.kdb import write_kdb
from kpatch.data import sample_db_path

from .conftest import FakePatcher, db_rows as rows, fake_is_patched, integrity, invoke

CHILD = textwrap.dedent("""
    import sys, time
    sys.path[:0] = {paths!r}
    import kpatch.apply.userdb as userdb
    from kpatch.containers.kdb import KernelDB
    from kpatch.apply.db import apply_to_db
    import importlib.util
    spec = importlib.util.spec_from_file_location("apply_conftest", {helpers!r})
    helpers = sys.modules["apply_conftest"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(helpers)
    FakePatcher, fake_is_patched = helpers.FakePatcher, helpers.fake_is_patched

    def mark(name):
        print(name, flush=True)
        time.sleep(30)  # the parent kills us here when this is its moment

    want = sys.argv[1]
    real_tx, real_put, real_backup = KernelDB.write_transaction, KernelDB.put_row, userdb.write_backup
    puts = []

    def tx(self):
        if want == "before-transaction":
            mark(want)
        return real_tx(self)

    def backup(*a, **k):
        out = real_backup(*a, **k)
        if want == "after-backup":
            mark(want)
        return out

    def put(self, *a):
        real_put(self, *a)
        puts.append(1)
        if want == "after-first-row" and len(puts) == 1:
            mark(want)

    def delete(self, *a):
        real_delete(self, *a)
        puts.append(1)
        if want == "after-first-row" and len(puts) == 1:
            mark(want)

    real_delete = KernelDB.delete
    KernelDB.write_transaction, KernelDB.put_row, KernelDB.delete, userdb.write_backup = tx, put, delete, backup
    real_commit = KernelDB._exec

    def exec_(self, sql, params=()):
        if sql == "COMMIT;" and want == "before-commit" and puts:
            mark(want)
        out = real_commit(self, sql, params)
        if sql == "COMMIT;" and want == "after-commit" and puts:
            mark(want)
        return out

    KernelDB._exec = exec_
    if sys.argv[2] == "apply":
        apply_to_db([{sample!r}], sys.argv[3], mode="override", rule_sets=["gfx1010-hazards"],
                    patch_fn=FakePatcher(), is_patched=fake_is_patched, jobs=1)
    else:
        userdb.restore_latest(sys.argv[3])
    print("finished", flush=True)
""")

MOMENTS = ["before-transaction", "after-backup", "after-first-row", "before-commit", "after-commit"]




def kill_at(moment: str, what: str, db: str) -> None:
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    root = os.path.dirname(tests)
    code = CHILD.format(paths=[root, tests], sample=sample_db_path(),
                        helpers=os.path.join(tests, "apply", "conftest.py"))
    p = subprocess.Popen([sys.executable, "-c", code, moment, what, db], stdout=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline().strip()
        assert line == moment, f"child printed {line!r} instead of reaching {moment}"
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stdout.close()


@pytest.mark.parametrize("moment", MOMENTS)
def test_apply_killed(tmp_path, monkeypatch, moment):
    cache = tmp_path / "cache"
    cache.mkdir()
    db = cache / "gfx1030_18.ukdb"
    write_kdb(str(db), [("keep.cl.o", " -mcpu=gfx1030", b"keep me")], user=True)
    before = rows(db)
    kill_at(moment, "apply", str(db))
    assert integrity(db) == [("ok",)]
    after = rows(db)
    if moment == "after-commit":
        assert len(after) > len(before) and all(after[k] == v for k, v in before.items())
    else:
        assert after == before
    # the DB still works: apply completes (or finds its work done), and revert steps back to `before`
    code, stdout, stderr, exc = invoke(monkeypatch, ["apply", "--db", sample_db_path(), "--mode", "override",
                                                     "--cu", "18", "--out-dir", str(cache)],
                                       patcher=FakePatcher(), is_patched=fake_is_patched)
    assert exc is None and code == 0, stderr
    # a backup left by the killed apply (written, never committed) is one more step: it finds nothing to undo
    for _ in range(2 if moment in ("after-backup", "after-first-row", "before-commit") else 1):
        code, _, stderr, exc = invoke(monkeypatch, ["revert", str(db)])
        assert exc is None and code == 0, stderr
    assert rows(db) == before and integrity(db) == [("ok",)]


@pytest.mark.parametrize("moment", ["before-transaction", "after-first-row", "before-commit", "after-commit"])
def test_revert_killed(tmp_path, monkeypatch, moment):
    cache = tmp_path / "cache"
    cache.mkdir()
    db = cache / "gfx1030_18.ukdb"
    write_kdb(str(db), [("keep.cl.o", " -mcpu=gfx1030", b"keep me")], user=True)
    before = rows(db)
    code, _, stderr, exc = invoke(monkeypatch, ["apply", "--db", sample_db_path(), "--mode", "override", "--cu",
                                                "18", "--out-dir", str(cache)],
                                  patcher=FakePatcher(), is_patched=fake_is_patched)
    assert exc is None and code == 0, stderr
    applied = rows(db)
    kill_at(moment, "revert", str(db))
    assert integrity(db) == [("ok",)]
    assert rows(db) == (before if moment == "after-commit" else applied)
    # the backup was not consumed; reverting again finishes the job (or finds it done)
    code, _, stderr, exc = invoke(monkeypatch, ["revert", str(db)])
    assert exc is None and code == 0, stderr
    assert rows(db) == before and integrity(db) == [("ok",)]
