#!/usr/bin/env python3
"""A stand-alone process that writes a MIOpen user kernel DB the way MIOpen
does while it compiles kernels at run time; the test harness runs it beside
`kpatch apply --db` and `kpatch revert` (tests/apply/test_live_writer.py).

What it copies from MIOpen (src/sqlite_db.cpp, src/include/miopen/sqlite_db.hpp,
src/include/miopen/kern_db.hpp, src/bz2.cpp):

- the DB is opened with ``sqlite3_open_v2(READWRITE | CREATE)`` and a busy
  timeout of 60000 ms (MIOPEN_SQL_BUSY_TIMEOUT_MS without back-off), then
  ``PRAGMA journal_mode=WAL;`` and ``CREATE TABLE IF NOT EXISTS`` with
  KernelConfig::CreateQuery's schema;
- every statement that returns SQLITE_BUSY is tried again (SQLite::Retry),
  here with a back-off of 0.1 ms * 2^k up to 30 s in all;
- a row is stored with ``INSERT OR REPLACE INTO kern_db(...) VALUES(?,...)``
  (KernDb::StoreRecordUnsafe): the blob is the code compressed by bzip2 level
  9 when that fits in the code's own length (BZ2_bzBuffToBuffCompress into a
  buffer of that size), with ``uncompressed_size`` the code's length, else
  the code itself with ``uncompressed_size`` 0; ``kernel_hash`` is the
  lowercase hex MD5 of the code.

It is deliberately independent of kpatch (sqlite3, bz2, hashlib only).

Behaviour: until the stop file appears, SIGTERM/SIGINT arrives or
``--seconds`` pass, it commits one transaction of 1-3 rows every
``--interval-ms`` (jittered), keys in its own namespace
(``writer-<pid>-<n>.cl.o`` / `` -mcpu=gfx1030``); now and then a row
replaces one of its earlier keys with new code, as MIOpen does when it
compiles a kernel again.  One row alone is a plain autocommit INSERT (what
MIOpen runs); 2-3 rows go in BEGIN ... COMMIT.  With ``--mode random`` or
``tight`` it keeps its connection for several transactions, or closes it
right after one, and sometimes waits with no connection, so it opens the DB
at random moments.  With ``--mode hold`` it opens the DB once, signals
ready, stays idle (connection open) for ``--idle-ms``, then writes on that
same connection until stopped.

Each committed row is appended to ``--log`` as one JSON line
``{"name", "args", "md5"}`` only AFTER COMMIT returned, then the log is
flushed and fsynced: the log is exactly the set of rows this "MIOpen"
believes it stored (for a key written twice, the later line wins).

``--ready FILE`` is created once the first connection is open and the schema
is in place.  At exit a JSON summary is printed on stdout: commits, rows,
busy retries, opens, reads, rows found missing when read back, errors (with
messages).  Exit status 0 unless the arguments are wrong.
"""

from __future__ import annotations

import argparse
import bz2
import hashlib
import json
import os
import random
import signal
import sqlite3
import sys
import time

BUSY_TIMEOUT_S = 60.0  # MIOPEN_SQL_BUSY_TIMEOUT_MS (no back-off build)
RETRY_LIMIT_S = 30.0  # MIOpen's LazyExponentialBackoff{10, 2, 30 s}
ARGS = " -mcpu=gfx1030"

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS `kern_db` ("
    "`id` INTEGER PRIMARY KEY ASC"
    ",`kernel_name` TEXT NOT NULL"
    ",`kernel_args` TEXT NOT NULL"
    ",`kernel_blob` BLOB NOT NULL"
    ",`kernel_hash` TEXT NOT NULL"
    ",`uncompressed_size` INT NOT NULL"
    ");"
    "CREATE UNIQUE INDEX IF NOT EXISTS `idx_kern_db` ON kern_db(kernel_name, kernel_args);"
)
INSERT = ("INSERT OR REPLACE INTO kern_db(kernel_name, kernel_args, kernel_blob, kernel_hash, "
          "uncompressed_size) VALUES(?, ?, ?, ?, ?);")


class Busy(Exception):
    """SQLITE_BUSY outlasted the retry loop (MIOpen throws "Timeout while waiting for Database")."""


def encode(code: bytes) -> tuple[bytes, str, int]:
    """(kernel_blob, kernel_hash, uncompressed_size) as KernDb::StoreRecordUnsafe stores ``code``."""
    packed = bz2.compress(code, 9)
    md5 = hashlib.md5(code).hexdigest()
    if len(packed) <= len(code):
        return packed, md5, len(code)
    return code, md5, 0


def make_code(rng: random.Random) -> bytes:
    """Code-object-like bytes: a fixed header, repeated words and some noise
    (compressible, as real code objects are; sometimes too short to compress)."""
    if rng.random() < 0.1:
        return bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 40)))
    words = [rng.getrandbits(32).to_bytes(4, "little") for _ in range(rng.randint(4, 32))]
    body = b"".join(rng.choice(words) for _ in range(rng.randint(64, 1024)))
    return b"\x7fELF\x02\x01\x01\x40" + bytes(8) + body + rng.randbytes(rng.randint(0, 64))


def is_busy(e: sqlite3.Error) -> bool:
    code = getattr(e, "sqlite_errorcode", None)
    if code is not None:
        return (code & 0xFF) in (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED
    msg = str(e)
    return "locked" in msg or "busy" in msg


class Writer:
    def __init__(self, opts: argparse.Namespace):
        self.o = opts
        self.rng = random.Random(opts.seed)
        self.pid = os.getpid()
        self.conn: sqlite3.Connection | None = None
        self.log = open(opts.log, "a", encoding="utf-8")
        self.n = 0
        self.committed: list[str] = []  # names committed, for replacing and reading back
        self.stats = {"commits": 0, "rows": 0, "busy_retries": 0, "opens": 0, "reads": 0, "read_missing": 0,
                      "errors": 0, "error_messages": [], "mode": opts.mode}
        self.stopping = False
        self.deadline = time.monotonic() + opts.seconds

    # --- stopping -------------------------------------------------------------

    def stop_requested(self) -> bool:
        if self.stopping or time.monotonic() >= self.deadline:
            return True
        return bool(self.o.stop) and os.path.exists(self.o.stop)

    def sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while not self.stop_requested():
            left = end - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, 0.005))

    # --- SQLite, as MIOpen drives it ----------------------------------------------

    def retry(self, fn):
        """SQLite::Retry: run ``fn`` again while it reports SQLITE_BUSY."""
        start = time.monotonic()
        delay = 1e-4
        while True:
            try:
                return fn()
            except sqlite3.OperationalError as e:
                if not is_busy(e):
                    raise
                self.stats["busy_retries"] += 1
                if time.monotonic() - start > RETRY_LIMIT_S:
                    raise Busy(f"Timeout while waiting for Database: {self.o.db}: {e}") from None
                time.sleep(delay)
                delay = min(delay * 2, 0.1)

    def open(self) -> None:
        conn = sqlite3.connect(self.o.db, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        try:
            self.retry(lambda: conn.execute("PRAGMA journal_mode=WAL;").fetchall())
            self.retry(lambda: conn.executescript(SCHEMA))
        except BaseException:
            conn.close()
            raise
        self.conn = conn
        self.stats["opens"] += 1
        if self.o.ready and not os.path.exists(self.o.ready):
            with open(self.o.ready, "w") as f:
                f.write(str(self.pid))

    def close(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            except sqlite3.Error as e:
                self.error(e)
            self.conn = None

    def error(self, e: BaseException) -> None:
        self.stats["errors"] += 1
        if len(self.stats["error_messages"]) < 20:
            self.stats["error_messages"].append(f"{type(e).__name__}: {e}")

    def next_rows(self) -> list[tuple[str, bytes]]:
        rows = []
        for _ in range(self.rng.choice((1, 1, 2, 3))):
            if self.committed and self.rng.random() < 0.1:
                name = self.rng.choice(self.committed)  # compiled again: same key, new code
            else:
                name = f"writer-{self.pid}-{self.n}.cl.o"
                self.n += 1
            if any(name == r[0] for r in rows):
                continue
            rows.append((name, make_code(self.rng)))
        return rows

    def transaction(self, rows: list[tuple[str, bytes]]) -> None:
        """Store ``rows`` in one transaction; returns once COMMIT returned."""
        conn = self.conn
        params = [(name, ARGS, *encode(code)) for name, code in rows]

        def once() -> None:
            try:
                if len(params) == 1:
                    conn.execute(INSERT, params[0])  # autocommit, as MIOpen stores a record
                else:
                    conn.execute("BEGIN;")
                    for p in params:
                        conn.execute(INSERT, p)
                    conn.execute("COMMIT;")
            except sqlite3.Error:
                if conn.in_transaction:
                    try:
                        conn.execute("ROLLBACK;")
                    except sqlite3.Error:
                        pass
                raise

        self.retry(once)
        # COMMIT returned: now, and only now, these rows are stored as far as MIOpen knows
        for name, p in zip((r[0] for r in rows), params):
            self.log.write(json.dumps({"name": name, "args": ARGS, "md5": p[3]}) + "\n")
        self.log.flush()
        os.fsync(self.log.fileno())
        self.stats["commits"] += 1
        self.stats["rows"] += len(rows)
        for name, _ in rows:
            if name not in self.committed:
                self.committed.append(name)

    def read_back(self) -> None:
        """MIOpen's lookup of a kernel it stored before (KernDb::FindRecordUnsafe)."""
        name = self.rng.choice(self.committed)
        sql = ("SELECT kernel_blob, kernel_hash, uncompressed_size FROM kern_db "
               f"WHERE (kernel_name = '{name}') AND (kernel_args = '{ARGS}');")
        row = self.retry(lambda: self.conn.execute(sql).fetchall())  # to the end, as sqlite3_exec does
        self.stats["reads"] += 1
        if not row:
            self.stats["read_missing"] += 1

    # --- the loop -------------------------------------------------------------------

    def gap(self) -> float:
        ms = self.o.interval_ms
        return self.rng.uniform(0.5 * ms, 1.5 * ms) / 1000.0

    def run(self) -> None:
        hold = self.o.mode == "hold"
        if hold:
            self.open()
            self.sleep(self.o.idle_ms / 1000.0)  # open, idle, before any write
        while not self.stop_requested():
            try:
                if self.conn is None:
                    self.open()
                self.transaction(self.next_rows())
                if self.committed and self.rng.random() < 0.2:
                    self.read_back()
            except (sqlite3.Error, Busy) as e:
                self.error(e)
                self.close()
                self.sleep(0.002)
                continue
            if not hold:
                r = self.rng.random()
                if r < (0.1 if self.o.mode == "tight" else 0.3):
                    self.close()  # closed right after one transaction
                    if r < 0.03 or (r < 0.1 and self.o.mode == "random"):
                        self.sleep(self.rng.uniform(0, 20 * self.o.interval_ms) / 1000.0)  # no connection
            self.sleep(self.gap())
        self.close()

    def finish(self) -> dict:
        self.log.close()
        return self.stats


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("db", help="the user kernel DB (created if missing)")
    ap.add_argument("--log", required=True, help="JSON lines of committed rows, appended after each COMMIT")
    ap.add_argument("--stop", help="stop when this file exists")
    ap.add_argument("--ready", help="create this file once the DB is open")
    ap.add_argument("--seconds", type=float, default=30.0, help="stop after this long at most")
    ap.add_argument("--mode", choices=("random", "tight", "hold"), default="random")
    ap.add_argument("--interval-ms", type=float, default=None,
                    help="mean time between transactions (default 3; 1 in tight mode)")
    ap.add_argument("--idle-ms", type=float, default=0.0,
                    help="hold mode: idle time with the DB open before writing")
    ap.add_argument("--seed", type=int, default=None)
    opts = ap.parse_args(argv)
    if opts.interval_ms is None:
        opts.interval_ms = 1.0 if opts.mode == "tight" else 3.0
    w = Writer(opts)

    def on_signal(signum, frame):
        w.stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        w.run()
    except (sqlite3.Error, Busy, OSError) as e:  # the first open failed: report it, do not hide it
        w.error(e)
    print(json.dumps(w.finish()))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
