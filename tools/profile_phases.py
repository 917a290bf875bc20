#!/usr/bin/env python3
"""Where the CPU time of `apply --db` or of the analysis goes, phase by phase (not a test).

    python tools/profile_phases.py apply [--db kdb_cache/corpus_gfx1030.kdb]
    python tools/profile_phases.py analyse [--no-sparse]

Runs the work once, in this process (``apply``: ``apply_to_db`` of the
corpus DB into a temporary directory, mode override, jobs=1, as
tools/bench_apply.py's apply side does; ``analyse``: ``analyse()`` of every
gfx1030 code object of the corpus, read beforehand, as
tools/bench_analysis.py's analyse side does), with a timer around each of
the functions listed in PHASES, and prints a tree: each phase's CPU seconds
(user+sys of this process, ``time.process_time``) inclusive of the phases
below it, its share of the whole, and how many times it ran; "(rest)" is
the time of a phase not spent in the phases listed below it.  A phase
reached by two ways (the analysis before patching and the one that
verifies it) appears under each.

The timers cost about a microsecond a call, and the phases are called per
code object or per function, not per instruction: the shares are those of
an untimed run, unlike a profiler that hooks every call (cProfile
inflates pure-Python code several times against numpy and C).  For the
goals themselves run the benches; this says what to cut.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

#: (module, name, label): the functions timed.  A name with a dot is a
#: method of a class of the module; a module-level function is replaced in
#: every kpatch module that imported it by name.
PHASES = [
    ("kpatch.apply.db", "apply_to_db", "apply_to_db"),
    ("kpatch.containers.kdb", "_bunzip2_capped", "bz2 decompress"),
    ("kpatch.containers.kdb", "md5_hex", "md5"),
    ("bz2", "compress", "bz2 compress"),
    ("kpatch.apply.userdb", "commit_rows", "write the user DB"),
    ("kpatch.apply.blob", "patch_code_object_checked", "patch (checked)"),
    ("kpatch.rewrite.patcher", "patch_code_object", "patch_code_object"),
    ("kpatch.rewrite.patcher", "verify", "verify (analysis after patching)"),
    ("kpatch.rewrite.patcher", "_RulePlan.unit_edits", "edits from findings"),
    ("kpatch.rewrite.relocate", "apply_edits", "rewrite (apply_edits)"),
    ("kpatch.rewrite.relocate", "_plan_layout", "plan the layout"),
    ("kpatch.rewrite.relocate", "_write_object", "write the object"),
    ("kpatch.codeobject.model", "CodeObject.metadata_parts", "metadata (decode the notes)"),
    ("kpatch.analysis.engine", "analyse", "analyse"),
    ("kpatch.analysis.engine", "function_ranges", "function ranges"),
    ("kpatch.analysis.codescan", "scan_text", "scan of .text"),
    ("kpatch.isa.decodememo", "decode_ranges", "decode"),
    ("kpatch.analysis.facts", "encoding_ids_of_columns", "encoding ids and new facts"),
    ("kpatch.analysis.engine", "unit_context", "graph (unit_context)"),
    ("kpatch.analysis.engine", "run_detectors", "detectors"),
    ("kpatch.analysis.detectors.waitstates", "detect", "wait-state hazards"),
    ("kpatch.analysis.engine", "_function_reports", "reports"),
]


class Tree:
    """Inclusive CPU seconds and calls per path of phase labels."""

    def __init__(self):
        self.time: dict[tuple, float] = {}
        self.calls: dict[tuple, int] = {}
        self.stack: list[str] = []

    def wrap(self, fn, label: str):
        tree = self

        @functools.wraps(fn)
        def timed(*a, **k):
            if label in tree.stack:  # (a phase inside itself: counted once, at the outer call)
                return fn(*a, **k)
            tree.stack.append(label)
            path = tuple(tree.stack)
            t = time.process_time()
            try:
                return fn(*a, **k)
            finally:
                tree.time[path] = tree.time.get(path, 0.0) + time.process_time() - t
                tree.calls[path] = tree.calls.get(path, 0) + 1
                tree.stack.pop()
        return timed

    def print(self, total: float) -> None:
        print(f"{'CPU s':>8} {'share':>6} {'calls':>7}  phase")
        print(f"{total:8.2f} {100.0:5.1f}% {1:7d}  (the whole run)")

        def kids(path: tuple) -> list[tuple]:
            return sorted((p for p in self.time if len(p) == len(path) + 1 and p[:len(path)] == path),
                          key=lambda p: -self.time[p])

        def show(path: tuple, depth: int) -> None:
            t = self.time[path]
            print(f"{t:8.2f} {100 * t / total:5.1f}% {self.calls[path]:7d}  {'  ' * depth}{path[-1]}")
            ks = kids(path)
            if ks:
                for k in ks:
                    show(k, depth + 1)
                rest = t - sum(self.time[k] for k in ks)
                print(f"{rest:8.2f} {100 * rest / total:5.1f}% {'':7s}  {'  ' * (depth + 1)}(rest)")

        tops = kids(())
        for p in tops:
            show(p, 0)
        rest = total - sum(self.time[p] for p in tops)
        print(f"{rest:8.2f} {100 * rest / total:5.1f}% {'':7s}  (outside every phase)")


def install(tree: Tree) -> None:
    """Put the timers of :data:`PHASES` in place."""
    import importlib
    for modname, name, label in PHASES:
        mod = importlib.import_module(modname)
        if "." in name:
            cls_name, meth = name.split(".")
            cls = getattr(mod, cls_name)
            raw = cls.__dict__[meth]
            if isinstance(raw, functools.cached_property):
                new = functools.cached_property(tree.wrap(raw.func, label))
                new.__set_name__(cls, meth)
                setattr(cls, meth, new)
            else:
                setattr(cls, meth, tree.wrap(raw, label))
            continue
        fn = getattr(mod, name)
        timed = tree.wrap(fn, label)
        for m in list(sys.modules.values()):
            if isinstance(m, types.ModuleType) and (m is mod or (m.__name__ or "").startswith("kpatch")):
                for attr, val in list(vars(m).items()):
                    if val is fn:
                        setattr(m, attr, timed)
                    elif isinstance(val, (list, tuple)) and any(
                            x is fn or (isinstance(x, tuple) and fn in x) for x in val):
                        # (a registry: e.g. the detectors' (name, function) pairs)
                        items = [timed if x is fn else tuple(timed if y is fn else y for y in x)
                                 if isinstance(x, tuple) else x for x in val]
                        setattr(m, attr, items if isinstance(val, list) else tuple(items))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("apply", "analyse"))
    ap.add_argument("--db", default=os.path.join(ROOT, "kdb_cache", "corpus_gfx1030.kdb"))
    ap.add_argument("--no-sparse", action="store_true", help="analyse: librocrand's object only")
    a = ap.parse_args()
    import importlib
    for m in ("kpatch.apply.db", "kpatch.apply.blob", "kpatch.analysis.detectors.waitstates"):
        importlib.import_module(m)  # (every module PHASES names and those importing names from them, first)
    tree = Tree()
    install(tree)
    if a.what == "apply":
        if not os.path.exists(a.db):
            sys.exit(f"{a.db} is missing: run tools/build_corpus_kdb.py")
        from kpatch.apply.db import apply_to_db
        from kpatch.apply.modes import default_patch_fn, default_provenance_fn
        print(f"apply_to_db of {a.db} ({os.path.getsize(a.db) / 1e6:.1f} MB), mode override, jobs=1, one process; "
              f"load {os.getloadavg()[0]:.2f}")
        with tempfile.TemporaryDirectory(prefix="kpatch-prof-") as tmp:
            t = time.process_time()
            apply_to_db([a.db], os.path.join(tmp, "gfx1030_18.ukdb"), mode="override", rule_sets=[],
                        patch_fn=default_patch_fn("override"), is_patched=default_provenance_fn(), dry_run=False,
                        jobs=1)
            total = time.process_time() - t
    else:
        from bench_common import _objects, corpus, describe_corpus
        from kpatch.analysis import engine
        with tempfile.TemporaryDirectory() as td:
            paths = corpus(td, 0, not a.no_sparse)
            cos = _objects(paths)
            what = describe_corpus(paths)
        print(f"analyse() of {what}, read beforehand, one process; load {os.getloadavg()[0]:.2f}")
        t = time.process_time()
        for co in cos:
            engine.analyse(co)
        total = time.process_time() - t
    tree.print(total)
    return 0


if __name__ == "__main__":
    sys.exit(main())
