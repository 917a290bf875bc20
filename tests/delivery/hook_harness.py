"""Helpers for the load-time hook tests: the C++ harness (harness.cpp, built
against Debian's hsa_api_trace.h), the real code objects they load, and
runs of the harness with their parsed output and JSON log."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
HSA_HEADER = "/usr/include/hsa/hsa_api_trace.h"
MIOPEN = os.path.join(ROOT, "tests", "fixtures", "miopen")
LIBROCRAND = os.path.join(ROOT, "kdb_cache", "root", "usr", "lib", "x86_64-linux-gnu", "librocrand.so.1.1")


def build_harness(out_dir: str) -> str:
    """Compile harness.cpp; skip the test with the reason when g++ or
    ROCr's header (Debian libhsa-runtime-dev) is missing."""
    gxx = shutil.which("g++")
    if not gxx:
        pytest.skip("g++ is not installed (tools/test.sh installs it)")
    if not os.path.exists(HSA_HEADER):
        pytest.skip(f"{HSA_HEADER} is missing: install Debian's libhsa-runtime-dev (tools/test.sh does)")
    exe = os.path.join(out_dir, "harness")
    hook_dir = os.path.join(ROOT, "kpatch", "delivery", "hook")
    subprocess.run([gxx, "-std=c++17", "-O1", "-DAMD_INTERNAL_BUILD", "-I/usr/include/hsa", f"-I{hook_dir}",
                    os.path.join(HERE, "harness.cpp"), "-o", exe, "-ldl", "-pthread"], check=True,
                   capture_output=True, text=True)
    return exe


@dataclass
class Load:
    thread: int
    index: int
    api: str
    status: int
    size: int
    received: bytes | None  # what the stand-in got (None: it was not called)
    file: str


@dataclass
class Run:
    onload: dict
    loads: list[Load]
    log: list[dict] = field(default_factory=list)
    stderr: str = ""
    stats: dict = field(default_factory=dict)  # mapped: distinct patched objects kept; spawned: patcher runs

    def objects(self) -> list[dict]:
        """Log lines of loaded objects (not OnLoad's)."""
        return [e for e in self.log if e["api"] != "OnLoad"]


def parse(stdout: str, stderr: str, log_path: str | None) -> Run:
    onload: dict = {}
    stats: dict = {}
    loads = []
    for line in stdout.splitlines():
        parts = line.split()
        if parts and parts[0] == "onload":
            onload = {"ok": parts[1] == "1", **dict(p.split("=", 1) for p in parts[2:])}
        elif parts and parts[0] == "stats":  # the hook's own counters, in this process
            stats = {k: int(v) for k, v in (p.split("=", 1) for p in parts[1:])}
        elif parts and parts[0] == "load":
            _, t, i, api, st, size, out, file = parts
            data = None
            if out != "-":
                with open(out, "rb") as f:
                    data = f.read()
            loads.append(Load(int(t), int(i), api, int(st, 16), int(size), data, file))
    log = []
    if log_path and os.path.exists(log_path):
        with open(log_path) as f:
            log = [json.loads(line) for line in f]
    return Run(onload, loads, log, stderr, stats)


def counting_python(path: str, count_file: str, before: str = "") -> str:
    """A KPATCH_PYTHON stand-in: a script that notes each start in
    ``count_file`` (runs ``before`` shell text) and then runs the real
    interpreter."""
    with open(path, "w") as f:
        f.write(f"#!/bin/sh\necho $$ >> '{count_file}'\n{before}\nexec '{sys.executable}' \"$@\"\n")
    os.chmod(path, 0o755)
    return path


def spawns(count_file: str) -> int:
    if not os.path.exists(count_file):
        return 0
    with open(count_file) as f:
        return len(f.read().split())
