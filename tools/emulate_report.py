#!/usr/bin/env python3
"""The share of patched real-stack kernels that `kpatch verify --emulate` proves equal.

For each corpus (each skipped when absent; --corpus chooses):

  rocblas   kdb_cache/sid-root/.../rocblas/4.4.1/library, every gfx1030 object (tools/fetch_sid.sh)
  miopen    tests/fixtures/miopen/gfx1030.kdb (tools/build_miopen_kdb.py)
  rocrand   kdb_cache/root/.../librocrand.so.1.1 (tools/fetch_corpus.sh)
  rocsparse kdb_cache/root/.../librocsparse.so.0.1 (tools/fetch_corpus.sh --all)

it patches each source as a user would (`kpatch apply --mode override
--json`; a host library with --drop-other-targets, as
tools/realstack_report.py does), lists the kernels apply reports
"patched" (the population), and runs kpatch's differential check (the
Python API of `kpatch verify --emulate`: kpatch.emulate.verify.verify, one
kernel at a time, the patched side decoded as gfx1010, the bound of the
approximations the patched object's provenance names) on ALL of them, or
with ``--sample N`` on a uniform random sample of N of them drawn with
``--seed S`` (without replacement, from the population in a fixed order:
the same command draws the same kernels).  One kernel's failure never stops
the run: an internal error is that kernel's "not verified" reason.

Apply's outputs are cached under kdb_cache/emulate/ (never committed), keyed
by the source's SHA-256: ``<hash16>-<name>`` and apply's JSON document
beside it (``.json``); delete them to patch again.

Printed per corpus: patched kernels, kernels run, equal / within ulp /
DIFFERENT / not verified (with a histogram of the reasons, addresses and
numbers blanked), and the share proven (equal + within ulp) over the
kernels run, with a 95% Wilson score interval when sampled; then the
overall share weighted by each corpus' patched-kernel count, with an
interval made of the per-corpus Wilson bounds at a Bonferroni-corrected
level (all sampled corpora's intervals hold together with >= 95%, so the
weighted share lies within the weighted bounds; a corpus run in full
contributes its exact share).

    python3 tools/emulate_report.py [--corpus rocblas,miopen,rocrand,rocsparse]
        [--sample N] [--seed S] [--runs 1] [--limit N] [--json FILE] [--object PATH ...]

``--object PATH`` adds a corpus "objects" of the given code objects / bundles
(for tests and one-off checks).  Not run in CI (the libraries take hours on
2 cores); tests/tools/test_emulate_report.py checks the counting and sampling.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import math
import os
import random
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

ROCBLAS = os.path.join(ROOT, "kdb_cache", "sid-root", "usr", "lib", "x86_64-linux-gnu", "rocblas", "4.4.1", "library")
MIOPEN = os.path.join(ROOT, "tests", "fixtures", "miopen", "gfx1030.kdb")
LIBDIR = os.path.join(ROOT, "kdb_cache", "root", "usr", "lib", "x86_64-linux-gnu")
CACHE = os.path.join(ROOT, "kdb_cache", "emulate")
NOT_APPLIED = "not applied yet"
STATUSES = ("equal", "within ulp", "different", "not verified")
PROVEN = ("equal", "within ulp")


@dataclass
class Source:
    """One input apply patches: a code object, bundle or host library (``db``: a MIOpen kernel DB)."""

    path: str
    db: bool = False
    drop_other_targets: bool = False


@dataclass(frozen=True)
class Unit:
    """One patched kernel: the source it is in, apply's part (URI) that reported it, and its name."""

    source: str
    part: str
    kernel: str


@dataclass
class Record:
    """The verdict for one :class:`Unit`."""

    unit: Unit
    status: str
    detail: str = ""
    seconds: float = 0.0
    recipe: str = ""

    def to_json(self) -> dict:
        return {"source": os.path.relpath(self.unit.source, ROOT), "part": self.unit.part,
                "kernel": self.unit.kernel, "status": self.status, "detail": self.detail,
                "class": reason_class(self.detail) if self.status not in PROVEN else "",
                "seconds": round(self.seconds, 2), "recipe": self.recipe or None}


@dataclass
class Tally:
    """A corpus' figures: its population of patched kernels and the verdicts of those run."""

    name: str
    patched: int = 0
    records: list = field(default_factory=list)
    errors: list = field(default_factory=list)
    skipped: list = field(default_factory=list)  # sources not applied yet (--cached-only): not in the population
    sampled: bool = False
    seconds: float = 0.0

    def counts(self) -> dict:
        c = collections.Counter(r.status for r in self.records)
        return {s: c[s] for s in STATUSES}

    def reasons(self, status: str) -> collections.Counter:
        return collections.Counter(reason_class(r.detail) for r in self.records if r.status == status)

    def proven(self) -> int:
        return sum(r.status in PROVEN for r in self.records)


def reason_class(detail: str) -> str:
    """A verdict's detail without its addresses, numbers and names (for the histogram)."""
    r = re.sub(r"(both stopped: original: (?:read|write)) of \d+ bytes at 0x[0-9a-f]+, outside every buffer "
               r"\(at 0x[0-9a-f]+: (\w+)[^)]*\).*", r"\1 outside every buffer (\2)", detail)
    r = re.sub(r"(both stopped: original: [^;]*); patched: .*", r"\1", r)  # the patched side's, alike
    r = re.sub(r"0x[0-9a-fA-F]+", "ADDR", r)
    r = re.sub(r"\brun \d+\b", "run N", r)
    r = re.sub(r"\(grid [^)]*\)", "", r)
    r = re.sub(r"\b\d+(\.\d+)?\b", "N", r)
    r = re.sub(r"\(([sv])\d+\)|\b[sv]\d+\b|[sv]\[\d+:\d+\]", "REG", r)
    r = re.sub(r"the kernel's arguments are .*", "the kernel's arguments are not the recipe's", r)
    return re.sub(r"\s+", " ", r).strip()[:140]


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """The Wilson score interval of a proportion k/n at the level of ``z`` ((0, 1) when n is 0)."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    d = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / d
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(0.0, centre - half), min(1.0, centre + half)


def z_for(alpha: float) -> float:
    """The two-sided standard normal quantile for level 1 - ``alpha`` (bisection on erf)."""
    lo, hi = 0.0, 10.0
    for _ in range(100):
        mid = (lo + hi) / 2
        if math.erfc(mid / math.sqrt(2)) > alpha:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def share(t: Tally, z: float = 1.959964) -> tuple[float, float, float]:
    """(share proven, lower, upper) of a corpus: exact when every patched kernel was run."""
    n, k = len(t.records), t.proven()
    if n == 0:
        return 0.0, 0.0, 1.0
    if not t.sampled or n >= t.patched:
        return k / n, k / n, k / n
    lo, hi = wilson(k, n, z)
    return k / n, lo, hi


def overall(tallies: list) -> tuple[float, float, float]:
    """The share weighted by each corpus' patched-kernel count, with the weighted per-corpus
    Wilson bounds at level 1 - 0.05 / (sampled corpora) (Bonferroni)."""
    ts = [t for t in tallies if t.patched and t.records]
    if not ts:
        return 0.0, 0.0, 1.0
    m = sum(1 for t in ts if t.sampled and len(t.records) < t.patched) or 1
    z = z_for(0.05 / m)
    total = sum(t.patched for t in ts)
    parts = [(t.patched / total, share(t, z)) for t in ts]
    return tuple(sum(w * s[i] for w, s in parts) for i in range(3))


def sample(units: list, n: int | None, seed: int) -> list:
    """``n`` of ``units`` drawn uniformly without replacement with seed ``seed`` (all when n is None
    or not smaller), in the population's order."""
    if n is None or n >= len(units):
        return list(units)
    picked = set(random.Random(seed).sample(range(len(units)), n))
    return [u for i, u in enumerate(units) if i in picked]


# -- applying (cached) -------------------------------------------------------------------

def source_hash(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


def apply_cached(src: Source, cache: str = CACHE, cached_only: bool = False) -> tuple[dict | None, str | None, str]:
    """(apply's JSON document, the patched output or None when apply wrote none, error text) of
    ``src``, from the cache when there (only from there with ``cached_only``: else (None, None, "not applied"))."""
    os.makedirs(cache, exist_ok=True)
    base = os.path.join(cache, f"{source_hash(src.path)}-{os.path.basename(src.path)}")
    out = base + ".ukdb-dir" if src.db else base
    doc_path = base + ".json"
    if not os.path.exists(doc_path) and cached_only:
        return None, None, NOT_APPLIED
    if not os.path.exists(doc_path):
        args = ["apply", "--mode", "override", "--json"]
        if src.db:
            args += ["--db", src.path, "--cu", "18", "--out-dir", out]
        else:
            args += [src.path, "-o", out + ".tmp"] + (["--drop-other-targets"] if src.drop_other_targets else [])
        env = dict(os.environ, KPATCH_NO_PROGRESS="1")
        p = subprocess.run([sys.executable, "-m", "kpatch", *args], capture_output=True, text=True, env=env)
        try:
            json.loads(p.stdout)
        except ValueError:
            return None, None, f"apply exit {p.returncode}, no JSON: {p.stderr.strip()[-200:]}"
        if not src.db and os.path.exists(out + ".tmp"):
            os.replace(out + ".tmp", out)
        with open(doc_path + ".tmp", "w") as f:
            f.write(p.stdout)
        os.replace(doc_path + ".tmp", doc_path)
    with open(doc_path) as f:
        doc = json.load(f)
    if src.db:
        written = doc.get("output")
        return doc, written if written and os.path.exists(written) else None, ""
    return doc, out if os.path.exists(out) else None, ""


def patched_units(src: Source, doc: dict) -> list:
    """The kernels apply's document reports patched, as units, in the document's order."""
    out = []
    for part in doc.get("parts", []) + doc.get("entries", []):
        for k in part.get("kernels", []):
            if k.get("status") == "patched":
                out.append(Unit(src.path, part.get("uri", ""), k["name"]))
    return out


# -- verifying ----------------------------------------------------------------------------

class Pairs:
    """The paired code objects (original, patched) of one source and its output, read once."""

    def __init__(self, orig: str, patched: str):
        from kpatch.codeobject import CodeObject
        from kpatch.diff.compare import collect_side, pair_items
        fa, _ = collect_side(orig)
        fb, _ = collect_side(patched)
        pairs, _, _ = pair_items(fa, fb)
        self.pairs = []
        for a, b in pairs:
            if a.data == b.data:
                continue  # apply left it alone: no patched kernel is in it
            try:
                names = {k.name for k in CodeObject.from_bytes(a.data).kernels}
            except Exception:  # noqa: BLE001 - an unreadable object holds no kernel we can run
                names = set()
            self.pairs.append((str(a.uri), a.data, b.data, names))

    def find(self, unit: Unit) -> tuple[bytes, bytes] | None:
        """The pair holding the unit's kernel: among the changed pairs holding a kernel of that name,
        the first whose original lies in apply's part (its URI a prefix), else the first."""
        cands = [p for p in self.pairs if unit.kernel in p[3]]
        inside = [p for p in cands if unit.part and (p[0].startswith(unit.part) or unit.part.startswith(p[0]))]
        best = (inside or cands or [None])[0]
        return None if best is None else (best[1], best[2])


def verify_unit(unit: Unit, pair: tuple[bytes, bytes] | None, *, runs: int, seed: int, limit: int) -> Record:
    """The verdict for one patched kernel (never raises: an internal error is "not verified")."""
    from kpatch.cli.verify import approximation_bound
    from kpatch.emulate.verify import verify
    if pair is None:
        return Record(unit, "not verified", "the kernel is in no changed pair of the source and apply's output")
    start = time.monotonic()
    try:
        v = verify(pair[0], pair[1], kernel=unit.kernel, runs=runs, seed=seed, patched_target="gfx1010",
                   limit=limit, max_ulp=approximation_bound(pair[1])[0])[0]
        return Record(unit, v.status, v.detail, time.monotonic() - start, v.recipe)
    except Exception as e:  # noqa: BLE001 - one kernel's failure never stops the run
        reason = getattr(e, "reason", None) or f"{type(e).__name__}: {e}"
        return Record(unit, "not verified", f"internal error: {reason}", time.monotonic() - start)


def run_corpus(name: str, sources: list, *, n: int | None, seed: int, runs: int, limit: int,
               progress=None, cache: str = CACHE, cached_only: bool = False) -> Tally:
    """Apply every source (cached), draw the sample from all their patched kernels, verify it
    (``cached_only``: the sources applied before, the others listed in ``skipped``)."""
    t = Tally(name, sampled=n is not None)
    start = time.monotonic()
    outputs, population = {}, []
    for src in sources:
        doc, out, err = apply_cached(src, cache, cached_only)
        if err == NOT_APPLIED:
            t.skipped.append(src.path)
            continue
        if doc is None:
            t.errors.append(f"{src.path}: {err}")
            continue
        t.errors += [f"{e.get('uri')}: {e.get('error')}" for e in doc.get("errors", [])]
        units = patched_units(src, doc)
        population += units
        outputs[src.path] = out
    t.patched = len(population)
    chosen = sample(population, n, seed)
    by_source = collections.defaultdict(list)
    for u in chosen:
        by_source[u.source].append(u)
    done = 0
    for path, units in by_source.items():  # one source's pairs in memory at a time
        out = outputs.get(path)
        pairs = Pairs(path, out) if out else None
        for u in units:
            r = verify_unit(u, pairs.find(u) if pairs else None, runs=runs, seed=seed, limit=limit)
            t.records.append(r)
            done += 1
            if progress:
                progress(f"   [{name} {done}/{len(chosen)}] {r.status:<12} {r.seconds:6.1f} s  "
                         f"{u.kernel[:90]}{': ' + r.detail[:160] if r.status not in PROVEN else ''}")
        del pairs
    t.seconds = time.monotonic() - start
    return t


def corpora(selected: set, objects: list) -> list:
    """(name, title, sources) of each selected corpus present."""
    out = []
    if "rocblas" in selected and os.path.isdir(ROCBLAS):
        objs = sorted(p for p in os.listdir(ROCBLAS) if "gfx1030" in p and not p.endswith(".dat"))
        out.append(("rocblas", "rocBLAS 4.4.1 Tensile library, gfx1030 objects",
                    [Source(os.path.join(ROCBLAS, p)) for p in objs]))
    if "miopen" in selected and os.path.exists(MIOPEN):
        out.append(("miopen", "MIOpen's kernels (tests/fixtures/miopen/gfx1030.kdb)", [Source(MIOPEN, db=True)]))
    for key, lib in (("rocrand", "librocrand.so.1.1"), ("rocsparse", "librocsparse.so.0.1")):
        path = os.path.join(LIBDIR, lib)
        if key in selected and os.path.exists(path):
            out.append((key, f"{key} (Debian bookworm, {lib})", [Source(path, drop_other_targets=True)]))
    if objects:
        out.append(("objects", "objects given with --object", [Source(os.path.abspath(p)) for p in objects]))
    return out


def show(t: Tally) -> list:
    c = t.counts()
    s, lo, hi = share(t)
    ci = f" (95% Wilson interval {100 * lo:.1f}-{100 * hi:.1f}%)" if t.sampled and len(t.records) < t.patched else ""
    lines = [f"== {t.name}  ({t.seconds:.0f} s)",
             f"   patched kernels {t.patched}, run {len(t.records)}"
             f"{' (sampled)' if t.sampled and len(t.records) < t.patched else ' (all)'}: "
             f"{c['equal']} equal, {c['within ulp']} within ulp, {c['different']} DIFFERENT, "
             f"{c['not verified']} not verified",
             f"   proven equal: {t.proven()}/{len(t.records)} = {100 * s:.1f}%{ci}"]
    for status in ("different", "not verified"):
        reasons = t.reasons(status)
        if reasons:
            lines.append(f"   {status}:")
            lines += [f"      {n:5d}  {r}" for r, n in reasons.most_common()]
    if t.skipped:
        lines.append(f"   not applied yet (--cached-only), their kernels not in the population: {len(t.skipped)} "
                     f"objects: {', '.join(os.path.basename(p) for p in t.skipped)}")
    lines += [f"   error: {e}" for e in t.errors[:10]]
    return lines


def load(path: str) -> list:
    """(corpus key, Tally) of each corpus of a --json file."""
    with open(path) as f:
        doc = json.load(f)
    out = []
    for c in doc["corpora"]:
        t = Tally(c["name"], patched=c["patched"], errors=c.get("errors", []), seconds=c.get("seconds", 0.0),
                  skipped=[os.path.join(ROOT, p) for p in c.get("skipped", [])],
                  sampled=doc.get("sample") is not None)
        t.records = [Record(Unit(os.path.join(ROOT, k["source"]), k["part"], k["kernel"]), k["status"], k["detail"],
                            k.get("seconds", 0.0), k.get("recipe") or "") for k in c["kernels"]]
        out.append((c["corpus"], t))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", default="rocblas,miopen,rocrand,rocsparse",
                    help="comma-separated: rocblas, miopen, rocrand, rocsparse")
    ap.add_argument("--object", action="append", default=[], help="also a corpus of these code objects")
    ap.add_argument("--sample", type=int, help="verify a seeded uniform random sample of N patched kernels per corpus")
    ap.add_argument("--seed", type=int, default=0, help="seed of the sample and of the synthesised inputs")
    ap.add_argument("--runs", type=int, default=1, help="runs per kernel (verify --runs)")
    ap.add_argument("--limit", type=int, default=1_000_000, help="wave-instructions per run and side (verify --limit)")
    ap.add_argument("--cache", default=CACHE, help="where apply's outputs are kept")
    ap.add_argument("--cached-only", action="store_true",
                    help="only the sources applied before (the others are named, their kernels left out)")
    ap.add_argument("--json", help="also write the figures and every verdict to this file")
    ap.add_argument("--combine", nargs="+", metavar="JSON",
                    help="run nothing: report the corpora of these --json files (separate runs) and their overall share")
    a = ap.parse_args(argv)
    wanted = set(a.corpus.split(",")) if a.corpus else set()
    tallies = []
    if a.combine:
        wanted = set()
        for path in a.combine:
            for key, t in load(path):
                print("\n".join(show(t)))
                tallies.append((key, t))
    for key, title, sources in corpora(wanted, a.object) if not a.combine else ():
        t = run_corpus(title, sources, n=a.sample, seed=a.seed, runs=a.runs, limit=a.limit, cache=a.cache,
                       cached_only=a.cached_only,
                       progress=lambda s: print(s, file=sys.stderr, flush=True))
        print("\n".join(show(t)), flush=True)
        tallies.append((key, t))
    for key in sorted(wanted - {k for k, _ in tallies} - {""}):
        print(f"== {key}: not present (see the module doc for how to fetch it)")
    s, lo, hi = overall([t for _, t in tallies])
    total = sum(t.patched for _, t in tallies)
    print(f"== overall (weighted by patched kernels, {total} in all): proven equal {100 * s:.1f}%"
          + (f" (95% interval {100 * lo:.1f}-{100 * hi:.1f}%)" if (lo, hi) != (s, s) else ""))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"sample": a.sample, "seed": a.seed, "runs": a.runs, "limit": a.limit,
                       "overall": {"share": s, "low": lo, "high": hi, "patched": total},
                       "corpora": [{"corpus": key, "name": t.name, "patched": t.patched, "run": len(t.records),
                                    "counts": t.counts(), "share": share(t), "errors": t.errors,
                                    "skipped": [os.path.relpath(p, ROOT) for p in t.skipped],
                                    "seconds": round(t.seconds, 1), "kernels": [r.to_json() for r in t.records]}
                                   for key, t in tallies]}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
