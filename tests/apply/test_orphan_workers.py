"""apply's worker processes end when the process that started them is gone
(a Ctrl-C can end kpatch with status 130 before its pool is shut down; the
orphaned workers ignore SIGINT and would wait for each other forever on the
pool's pipes, holding the terminal's stderr: CI's test_ctrl_c_while_starting
timed out on exactly that)."""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import pytest

from kpatch.apply import db as apply_db

pytestmark = pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="needs fork")


def _sleep_and_say(path: str) -> int:
    with open(path, "w") as f:
        f.write(str(os.getpid()))
    time.sleep(30)
    return 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for this purpose
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_worker_ends_when_its_parent_is_gone(tmp_path):
    said = tmp_path / "worker.pid"
    child = os.fork()
    if child == 0:  # the "kpatch" process: starts a pool as apply does, then ends without shutting it down
        try:
            pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork"),
                                       initializer=apply_db._init_worker, initargs=({}, False))
            pool.submit(_sleep_and_say, str(said))
            for _ in range(200):
                if said.exists() and said.read_text():
                    break
                time.sleep(0.05)
        finally:
            os._exit(130)
    os.waitpid(child, 0)
    worker = int(said.read_text())
    deadline = time.monotonic() + 10
    while _alive(worker) and time.monotonic() < deadline:
        time.sleep(0.05)
    alive = _alive(worker)
    if alive:
        os.kill(worker, 9)
    assert not alive, "the worker outlived its parent"
