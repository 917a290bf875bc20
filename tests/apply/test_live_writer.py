"""`kpatch apply --db` and `kpatch revert` beside a live MIOpen-like writer.

A user's training run may compile kernels, and so write MIOpen's user kernel
DB, while they run kpatch.  tools/miopen_writer.py is a separate process that
writes the DB exactly as MIOpen does (WAL, busy timeout, INSERT OR REPLACE,
opening and closing the DB at random moments) and logs every row only after
its COMMIT returned.  Each trial here starts from a user DB with some rows,
starts the writer, runs apply and revert (in-process, the rules engine
replaced by conftest.FakePatcher) at random offsets while it writes, stops
it, and checks the DB with sqlite3, bz2 and hashlib alone:

- every row the writer logged is there with its MD5 (the blob decoded too),
  and so is every row the DB started with: "lost" counts those that are not;
- ``PRAGMA integrity_check`` says ``ok``;
- right after an apply, the rows it was to write hold the marked code
  (md5 of conftest.marked(fixture)); after a revert, they are back to what
  they were before that apply;
- every apply and every revert succeeded: one refused because the writer
  holds the DB is a failure (they must wait for MIOpen's transaction, as
  MIOpen waits for theirs), and so is any error the writer itself met.

Trial kinds: ``random`` (writer at random moments), ``tight`` (a transaction
every ~1 ms for the whole apply and revert), ``hold`` (a connection opened
before apply starts, idle and then writing, kept until after revert ends),
``double`` (two applies, then two reverts stepping back through both).

The second test runs the same checker against a deliberately broken apply
(a copy of the DB taken at its start, changed, and renamed over the DB, as
kpatch did before) and must see rows lost: the checker can see a loss.  The
third runs it against a minimal apply/revert written here that goes through
SQLite (the design issue 16 asks for) and must see nothing wrong: the checker
raises no false alarm.
"""

from __future__ import annotations

import bz2
import hashlib
import importlib.util
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field


from conftest import ROOT

from .conftest import FakePatcher, fake_is_patched, fixture, invoke, marked, read

WRITER = os.path.join(ROOT, "tools", "miopen_writer.py")
FIXTURES_1030 = ("miopen_like.cl.gfx1030.v4.hsaco", "asm_kernels.s.gfx1030.v4.hsaco",
                 "mathops.hip.gfx1030.v4.hsaco", "miopen_like.cl.gfx1030.v5.hsaco", "vecops.hip.gfx1030.v4.hsaco")
SHARED_KEY = ("miopen_like.cl.o", " -DMLO_FILTER_SIZE0=3 -mcpu=gfx1030")
# Two system kDBs of the fixtures, 16 entries each (an apply takes a while, so the writer commits during
# it).  SHARED_KEY is in both (different code) and in the starting user DB (old code): apply A replaces
# it, apply B replaces that, and two reverts must step back through both.
SOURCE_A = [(*SHARED_KEY, FIXTURES_1030[0])] + [
    (f"va{i}.cl.o", f" -DV={i} -mcpu=gfx1030", FIXTURES_1030[i % len(FIXTURES_1030)]) for i in range(15)]
SOURCE_B = [(*SHARED_KEY, FIXTURES_1030[2])] + [
    (f"vb{i}.cl.o", f" -O{i % 4} -DW={i} -mcpu=gfx1030", FIXTURES_1030[(i + 1) % len(FIXTURES_1030)])
    for i in range(15)]
SEED_ROWS = 40
TRIALS = 52
KINDS = ("random", "tight", "hold", "double")
TRIAL_DEADLINE_S = 30.0  # a watchdog kills the writer after this; the trial then fails
WAIT_S = 15.0  # every wait on the writer (ready, exit) is bounded by this


def _tool():
    spec = importlib.util.spec_from_file_location("miopen_writer", WRITER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


mw = _tool()  # its SCHEMA, INSERT and encode: MIOpen's, written without kpatch


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


# --- the DB, read with sqlite3 alone ---------------------------------------------------------


def connect(path: str) -> sqlite3.Connection:
    """A plain connection that waits for locks (reads a WAL as MIOpen would)."""
    return sqlite3.connect(path, timeout=WAIT_S, isolation_level=None)


def read_keys(path: str, keys) -> dict:
    """{(name, args): md5 of the decoded code, or None when absent}; reading
    beside the writer, so it waits for locks."""
    conn = connect(path)
    try:
        out = {}
        for name, args in keys:
            row = conn.execute("SELECT kernel_blob, kernel_hash, uncompressed_size FROM kern_db "
                               "WHERE kernel_name = ? AND kernel_args = ?;", (name, args)).fetchall()
            out[(name, args)] = decoded_md5(*row[0]) if row else None
        return out
    finally:
        conn.close()


def observe(path: str, keys) -> dict:
    """:func:`read_keys` during a trial: a DB that cannot be read gives
    ``"unreadable: ..."`` for every key (counted as wrong, never raised)."""
    try:
        return read_keys(path, keys)
    except sqlite3.Error as e:
        return {k: f"unreadable: {e}" for k in keys}


def decoded_md5(blob: bytes, stored_md5, size: int) -> str:
    """The MD5 of the code a row holds, after MIOpen's own checks; a row that
    fails them reads as ``"bad: ..."`` (never equal to an expected MD5)."""
    try:
        code = bz2.decompress(blob) if size else bytes(blob)
    except (OSError, ValueError) as e:
        return f"bad: blob does not decompress: {e}"
    if len(code) != (size or len(blob)):
        return "bad: uncompressed_size is not the code's length"
    if md5(code) != stored_md5:
        return "bad: kernel_hash is not the code's MD5"
    return stored_md5


def make_seed(path: str, rng: random.Random) -> dict:
    """A user DB as MIOpen leaves it (WAL): SEED_ROWS rows of its own plus
    SHARED_KEY holding old code; returns {key: md5}."""
    rows = {}
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL;")
        conn.executescript(mw.SCHEMA)
        conn.execute("BEGIN;")
        items = [(f"seed-{i}.cl.o", " -mcpu=gfx1030", mw.make_code(rng)) for i in range(SEED_ROWS)]
        items.append((*SHARED_KEY, b"old code " + rng.randbytes(64)))
        for name, args, code in items:
            blob, h, size = mw.encode(code)
            conn.execute(mw.INSERT, (name, args, blob, h, size))
            rows[(name, args)] = h
        conn.execute("COMMIT;")
    finally:
        conn.close()
    return rows


def build_source(path: str, items) -> dict:
    """A system kDB (journal off, no WAL: as MIOpen ships them) of the fixture
    items; returns {key: md5 of what override mode with FakePatcher stores}."""
    conn = sqlite3.connect(path, isolation_level=None)
    want = {}
    try:
        conn.executescript(mw.SCHEMA)
        for name, args, f in items:
            code = read(fixture(f))
            conn.execute(mw.INSERT, (name, args, *mw.encode(code)))
            want[(name, args)] = md5(marked(code))
    finally:
        conn.close()
    return want


# --- the writer process --------------------------------------------------------------------


class WriterProc:
    """tools/miopen_writer.py running on ``db``; ``stop()`` returns its summary."""

    def __init__(self, db: str, work: str, mode: str, seed: int, idle_ms: float = 0.0):
        self.log = os.path.join(work, "writer.log")
        self.stopfile = os.path.join(work, "writer.stop")
        self.ready = os.path.join(work, "writer.ready")
        cmd = [sys.executable, WRITER, db, "--log", self.log, "--stop", self.stopfile, "--ready", self.ready,
               "--mode", mode, "--seed", str(seed), "--seconds", str(TRIAL_DEADLINE_S), "--idle-ms", str(idle_ms)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.killed = False
        self.watchdog = threading.Timer(TRIAL_DEADLINE_S + 5, self.kill)
        self.watchdog.daemon = True
        self.watchdog.start()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.killed = True
            self.proc.kill()

    def wait_ready(self) -> None:
        end = time.monotonic() + WAIT_S
        while not os.path.exists(self.ready):
            if self.proc.poll() is not None or time.monotonic() > end:
                self.kill()
                out, err = self.proc.communicate(timeout=WAIT_S)
                raise AssertionError(f"the writer did not open the DB: {out} {err}")
            time.sleep(0.001)

    def stop(self) -> dict:
        with open(self.stopfile, "w"):
            pass
        try:
            out, err = self.proc.communicate(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGTERM)
            try:
                out, err = self.proc.communicate(timeout=WAIT_S)
            except subprocess.TimeoutExpired:
                self.kill()
                out, err = self.proc.communicate()
        self.watchdog.cancel()
        assert self.proc.returncode == 0 and out.strip(), f"writer exit {self.proc.returncode}: {err}"
        summary = json.loads(out.strip().splitlines()[-1])
        summary["killed"] = self.killed
        return summary

    def count(self) -> int:
        """How many rows the writer has committed so far (lines in its log)."""
        try:
            with open(self.log, "rb") as f:
                return f.read().count(b"\n")
        except FileNotFoundError:
            return 0

    def logged(self) -> dict:
        """{(name, args): md5} of every row the writer committed (the later line wins)."""
        rows = {}
        with open(self.log, encoding="utf-8") as f:
            for line in f:
                j = json.loads(line)
                rows[(j["name"], j["args"])] = j["md5"]
        return rows


# --- the harness ---------------------------------------------------------------------------


@dataclass
class Tally:
    """What all trials saw; ``line()`` is the summary CI logs show."""

    trials: int = 0
    kinds: Counter = field(default_factory=Counter)
    committed: int = 0  # rows the writer committed (log lines)
    lost: int = 0  # logged or starting rows missing or changed at the end
    lost_trials: int = 0
    integrity: Counter = field(default_factory=Counter)
    applies_planned: int = 0
    applies_ok: int = 0
    reverts_ok: int = 0
    failures: Counter = field(default_factory=Counter)  # "apply: reason" / "revert: reason"
    wrong_after: Counter = field(default_factory=Counter)  # kpatch's rows not as they must be
    writer_errors: Counter = field(default_factory=Counter)
    read_missing: int = 0
    writer_killed: int = 0
    overlap_rows: int = 0  # writer commits that returned while an apply or revert ran
    overlap_trials: int = 0  # trials where the writer committed during an apply
    call_seconds: list = field(default_factory=list)  # how long each successful apply took
    seconds: float = 0.0
    examples: list = field(default_factory=list)

    @property
    def failed(self) -> int:
        return sum(self.failures.values())

    def line(self, name: str) -> str:
        integ = ", ".join(f"{k}: {v}" for k, v in sorted(self.integrity.items()))
        fails = "; ".join(f"{k} x{v}" for k, v in self.failures.most_common()) or "none"
        werr = "; ".join(f"{k} x{v}" for k, v in self.writer_errors.most_common(3)) or "none"
        wrong = ", ".join(f"{k} x{v}" for k, v in self.wrong_after.items()) or "none"
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(self.kinds.items()))
        calls = self.call_seconds or [0.0]
        return (f"{name}: trials {self.trials} ({kinds}) in {self.seconds:.1f} s; writer committed "
                f"{self.committed} rows; rows lost {self.lost} (in {self.lost_trials} trials); "
                f"integrity_check {integ}; applies ok {self.applies_ok}, reverts ok {self.reverts_ok}, "
                f"failed {self.failed} ({fails}); kpatch rows wrong: {wrong}; writer errors: {werr}; "
                f"writer read-back misses {self.read_missing}; writers killed {self.writer_killed}; "
                f"writer commits during apply/revert {self.overlap_rows} (trials with one during apply "
                f"{self.overlap_trials}); apply took {1000 * sum(calls) / len(calls):.0f} ms on average, "
                f"{1000 * max(calls):.0f} ms at most")


def reason(db: str, stdout: str, stderr: str, exc) -> str:
    """Why an apply or revert failed, in words that add up over trials (the
    DB's path left out)."""
    if exc is not None:
        text = f"{type(exc).__name__}: {exc}"
    else:
        lines = (stderr.strip() or stdout.strip()).splitlines()
        text = lines[-1] if lines else "no message"
    text = text.replace(db, "DB")
    if "in use" in text:
        return "DB in use by another process"
    if "changed while" in text:
        return "DB changed while kpatch was writing"
    return text[:120]


def real_apply(monkeypatch, db: str, src: str) -> tuple[bool, str]:
    out_dir = os.path.dirname(db)
    code, stdout, stderr, exc = invoke(monkeypatch, ["apply", "--db", src, "--mode", "override", "--cu", "18",
                                                     "--out-dir", out_dir],
                                       patcher=FakePatcher(), is_patched=fake_is_patched)
    return (exc is None and code == 0), reason(db, stdout, stderr, exc)


def real_revert(monkeypatch, db: str) -> tuple[bool, str]:
    code, stdout, stderr, exc = invoke(monkeypatch, ["revert", db])
    return (exc is None and code == 0), reason(db, stdout, stderr, exc)


def check_db(db: str, expected: dict) -> tuple[str, int, int, list]:
    """(integrity_check result, rows of ``expected`` missing or changed, keys
    ``expected`` maps to None that are present, examples)."""
    try:
        conn = connect(db)
        try:
            integ = "; ".join(str(r[0]) for r in conn.execute("PRAGMA integrity_check;").fetchall())
        finally:
            conn.close()
    except sqlite3.Error as e:
        return f"unreadable: {e}", len(expected), 0, []
    try:
        got = read_keys(db, expected)
    except sqlite3.Error as e:
        return integ, len(expected), 0, [f"rows unreadable: {e}"]
    bad = [(k, v, got[k]) for k, v in expected.items() if got[k] != v]
    lost = [b for b in bad if b[1] is not None]
    return integ, len(lost), len(bad) - len(lost), bad[:3]


def run_trials(tmp_path, monkeypatch, tally: Tally, n: int, *, apply_fn, revert_fn, seed: int,
               kinds=KINDS) -> None:
    """``n`` trials of the kinds in turn (see the module doc), counted into
    ``tally``; ``revert_fn`` None: no reverts."""
    rng = random.Random(seed)
    srcs = []
    for tag, items in (("a", SOURCE_A), ("b", SOURCE_B)):
        path = str(tmp_path / f"src_{tag}.kdb")
        srcs.append((path, build_source(path, items)))
    start = time.monotonic()
    for t in range(n):
        kind = kinds[t % len(kinds)]
        work = tmp_path / f"trial{t}"
        (work / "cache").mkdir(parents=True)
        db = str(work / "cache" / "gfx1030_18.ukdb")
        seed_rows = make_seed(db, rng)
        state = dict(seed_rows)  # what the starting rows and kpatch's must hold now (None: absent)
        plan = [srcs[t // len(kinds) % 2]]
        if kind == "double":
            plan = [srcs[0], srcs[1]]
        calls = tally.call_seconds[-8:] or [0.05]
        apply_ms = 1000 * sum(calls) / len(calls)  # how long one apply takes here, lately
        pre = rng.uniform(0, 0.03)
        # hold: the writer's connection is open before apply starts, idle, and writes from some moment
        # inside the apply (or just after it) on, until after the last revert ended
        writer = WriterProc(db, str(work), "random" if kind == "double" else kind, seed=rng.getrandbits(31),
                            idle_ms=1000 * pre + rng.uniform(0, 1.2 * apply_ms) if kind == "hold" else 0.0)
        history = []  # the state of the source keys before each successful apply
        overlapped = False

        def timed(fn, *a):
            n0 = writer.count()
            t0 = time.monotonic()
            r = fn(monkeypatch, db, *a)
            dt = time.monotonic() - t0
            n = writer.count() - n0
            tally.overlap_rows += n
            return r, dt, n

        try:
            writer.wait_ready()
            time.sleep(pre)
            for src, want in plan:
                tally.applies_planned += 1
                before = observe(db, want)
                (ok, why), dt, n = timed(apply_fn, src)
                overlapped |= n > 0
                if not ok:
                    tally.failures[f"apply: {why}"] += 1
                    continue
                tally.applies_ok += 1
                tally.call_seconds.append(dt)
                after = observe(db, want)
                for k in want:
                    if after[k] != want[k]:
                        tally.wrong_after["after apply"] += 1
                history.append(before)
                state.update(want)
                time.sleep(rng.uniform(0, 0.03))
            while history and revert_fn is not None:
                before = history.pop()
                (ok, why), _, _ = timed(revert_fn)
                if not ok:
                    tally.failures[f"revert: {why}"] += 1
                    break
                tally.reverts_ok += 1
                now = observe(db, before)
                for k, v in before.items():
                    if now[k] != v:
                        tally.wrong_after["after revert"] += 1
                state.update(before)  # None: the key must be absent
                time.sleep(rng.uniform(0, 0.03))
            if kind == "hold":
                time.sleep(0.02)  # the held connection writes on after the last revert ended
        finally:
            summary = writer.stop()
        logged = writer.logged()
        expected = dict(state)
        expected.update(logged)
        integ, lost, stale, examples = check_db(db, expected)
        if stale:
            tally.wrong_after["present at the end after a revert removed them"] += stale
        tally.trials += 1
        tally.overlap_trials += overlapped
        tally.kinds[kind] += 1
        tally.committed += summary["rows"]
        tally.lost += lost
        tally.lost_trials += bool(lost)
        tally.integrity["ok" if integ == "ok" else "FAILED"] += 1
        if integ != "ok" and len(tally.examples) < 5:
            tally.examples.append(f"trial {t} ({kind}): integrity_check: {integ[:200]}")
        if (lost or stale) and len(tally.examples) < 5:
            tally.examples.append(f"trial {t} ({kind}): {lost} lost, {stale} stale, e.g. {examples[:2]}")
        for m in summary["error_messages"]:
            tally.writer_errors[m[:100]] += 1
        tally.read_missing += summary["read_missing"]
        if kind == "hold" and summary["opens"] != 1:
            tally.writer_errors[f"hold: the connection was not kept ({summary['opens']} opens)"] += 1
        tally.writer_killed += summary["killed"]
        shutil.rmtree(work, ignore_errors=True)
    tally.seconds = time.monotonic() - start


def report(capsys, record_property, name: str, tally: Tally) -> None:
    line = tally.line(name)
    record_property("summary", line)
    with capsys.disabled():
        print("\n" + line)
        for e in tally.examples:
            print(f"  {e}")


# --- the tests -------------------------------------------------------------------------------


def test_apply_and_revert_beside_a_live_writer(tmp_path, monkeypatch, capsys, record_property):
    """>= 50 trials: no committed row lost, integrity ok, every apply and revert succeeded."""
    tally = Tally()
    run_trials(tmp_path, monkeypatch, tally, TRIALS, apply_fn=real_apply, revert_fn=real_revert, seed=16)
    report(capsys, record_property, "live writer", tally)
    assert tally.trials >= 50 and tally.committed > 0
    assert tally.lost == 0, tally.line("live writer")
    assert tally.integrity == Counter(ok=tally.trials), tally.line("live writer")
    assert tally.failed == 0, tally.line("live writer")
    assert tally.applies_ok == tally.applies_planned
    assert tally.reverts_ok == tally.applies_ok
    assert not tally.wrong_after, tally.line("live writer")
    assert not tally.writer_errors and tally.read_missing == 0 and tally.writer_killed == 0, \
        tally.line("live writer")
    # the trials did test something: the writer committed while apply ran in most of them
    assert tally.overlap_trials >= tally.trials // 2, tally.line("live writer")


def replacing_apply(monkeypatch, db: str, src: str) -> tuple[bool, str]:
    """What kpatch did before (deliberately broken): copy the DB, change the
    copy, rename it over the DB.  No locks: rows MIOpen commits meanwhile, or
    through a connection it keeps open, go to the old file."""
    tmp = db + ".broken-tmp"
    shutil.copyfile(db, tmp)
    for s in ("-wal",):
        if os.path.exists(db + s):
            shutil.copyfile(db + s, tmp + s)
    conn = sqlite3.connect(tmp, isolation_level=None)
    try:
        src_conn = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
        rows = src_conn.execute("SELECT kernel_name, kernel_args, kernel_blob, kernel_hash, uncompressed_size "
                                "FROM kern_db;").fetchall()
        src_conn.close()
        conn.execute("BEGIN;")
        for name, args, blob, h, size in rows:
            code = marked(bz2.decompress(blob) if size else bytes(blob))
            conn.execute(mw.INSERT, (name, args, *mw.encode(code)))
        conn.execute("COMMIT;")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE);")
    finally:
        conn.close()
    time.sleep(0.03)  # building the new file takes a while on a real DB
    os.replace(tmp, db)
    for s in ("-wal", "-shm"):
        if os.path.exists(tmp + s):
            os.remove(tmp + s)
    return True, "replaced"


def test_the_checker_sees_rows_lost_by_a_replacing_apply(tmp_path, monkeypatch, capsys, record_property):
    """The harness catches the old, replace-by-rename apply: rows lost (or a
    broken DB) in at least one of a few tight/hold trials."""
    tally = Tally()
    run_trials(tmp_path, monkeypatch, tally, 6, apply_fn=replacing_apply, revert_fn=None, seed=7,
               kinds=("tight", "hold"))
    report(capsys, record_property, "broken writer (replace by rename)", tally)
    assert tally.applies_ok == 6
    assert tally.lost > 0 or tally.integrity["FAILED"] > 0, tally.line("broken writer")


class ThroughSqlite:
    """A minimal apply/revert that writes THROUGH SQLite (one IMMEDIATE
    transaction in the live DB, a busy timeout): the design issue 16 asks
    for, written here without kpatch.  The checker must find nothing wrong
    with it, or it would fail a correct kpatch too.  Old rows of the keys it
    writes are kept in memory, one set per apply, for revert."""

    def __init__(self):
        self.saved: dict[str, list] = {}

    def apply(self, monkeypatch, db: str, src: str) -> tuple[bool, str]:
        s = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
        rows = s.execute("SELECT kernel_name, kernel_args, kernel_blob, uncompressed_size "
                         "FROM kern_db;").fetchall()
        s.close()
        conn = sqlite3.connect(db, timeout=60.0, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE;")
            old = {}
            for name, args, blob, size in rows:
                old[(name, args)] = conn.execute(
                    "SELECT kernel_blob, kernel_hash, uncompressed_size FROM kern_db "
                    "WHERE kernel_name = ? AND kernel_args = ?;", (name, args)).fetchone()
                code = marked(bz2.decompress(blob) if size else bytes(blob))
                conn.execute(mw.INSERT, (name, args, *mw.encode(code)))
            conn.execute("COMMIT;")
        finally:
            conn.close()
        self.saved.setdefault(db, []).append(old)
        return True, "written"

    def revert(self, monkeypatch, db: str) -> tuple[bool, str]:
        old = self.saved[db].pop()
        conn = sqlite3.connect(db, timeout=60.0, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE;")
            for (name, args), row in old.items():
                if row is None:
                    conn.execute("DELETE FROM kern_db WHERE kernel_name = ? AND kernel_args = ?;", (name, args))
                else:
                    conn.execute(mw.INSERT, (name, args, *row))
            conn.execute("COMMIT;")
        finally:
            conn.close()
        return True, "restored"


def test_the_checker_passes_an_apply_that_writes_through_sqlite(tmp_path, monkeypatch, capsys, record_property):
    """No false alarm: the same trials, apply and revert done right (through
    SQLite), see nothing lost, integrity ok, every row as it must be."""
    ref = ThroughSqlite()
    tally = Tally()
    run_trials(tmp_path, monkeypatch, tally, 12, apply_fn=ref.apply, revert_fn=ref.revert, seed=3)
    report(capsys, record_property, "reference writer (through SQLite)", tally)
    assert tally.trials == 12 and tally.committed > 0
    assert tally.lost == 0 and tally.integrity == Counter(ok=12) and tally.failed == 0, tally.line("reference")
    assert tally.applies_ok == tally.applies_planned == tally.reverts_ok and not tally.wrong_after
    assert not tally.writer_errors and tally.read_missing == 0 and tally.writer_killed == 0
