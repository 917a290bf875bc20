"""tools/emulate_report.py: its counting, sampling and intervals on tiny inputs.

The corpus here is made by hand: a cached apply document (as `kpatch apply
--json` writes it) naming three patched kernels of the vecops fixture, and a
"patched" output that is the original with one load offset of ``vec_add``
changed.  So the counts are known without kpatch's output: vec_add is
DIFFERENT, block_reduce (its code unchanged) equal, and a kernel the document
names but no code object holds is not verified.  The Wilson interval is
checked against the roots of its defining quadratic, the sample against
uniformity over many seeds.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import sys

import numpy as np

from kpatch.isa import formats as F
from tests.emulate.common import FIXTURES, mutate, read, with_field

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("emulate_report", os.path.join(ROOT, "tools", "emulate_report.py"))
report = importlib.util.module_from_spec(_spec)
sys.modules["emulate_report"] = report  # dataclasses look their module up
_spec.loader.exec_module(report)


def test_wilson_interval_is_the_roots_of_its_quadratic():
    """Wilson's interval: the p with (k/n - p)^2 = z^2 p (1 - p) / n."""
    z = 1.959964
    for k, n in ((8, 10), (150, 150), (0, 20), (141, 150)):
        ph = k / n
        # (1 + z^2/n) p^2 - (2 ph + z^2/n) p + ph^2 = 0
        roots = sorted(np.roots([1 + z * z / n, -(2 * ph + z * z / n), ph * ph]).real)
        lo, hi = report.wilson(k, n)
        assert math.isclose(lo, max(0.0, roots[0]), abs_tol=1e-9) and math.isclose(hi, min(1.0, roots[1]), abs_tol=1e-9)
    assert report.wilson(0, 0) == (0.0, 1.0)
    # the normal quantiles of the tables: 95% two-sided 1.959964, Bonferroni over two 2.241403
    assert math.isclose(report.z_for(0.05), 1.959964, abs_tol=1e-5)
    assert math.isclose(report.z_for(0.025), 2.241403, abs_tol=1e-5)


def test_sample_is_seeded_uniform_and_without_replacement():
    units = list(range(40))
    a = report.sample(units, 10, 7)
    assert a == report.sample(units, 10, 7) and a != report.sample(units, 10, 8)
    assert len(set(a)) == 10 and set(a) <= set(units) and a == sorted(a)  # the population's order
    assert report.sample(units, None, 0) == units and report.sample(units, 99, 0) == units
    hits = np.zeros(40)
    for seed in range(2000):
        hits[report.sample(units, 10, seed)] += 1
    # each unit drawn with probability 1/4: 500 of 2000 expected, sd ~19.4; 6 sd either side
    assert (abs(hits - 500) < 120).all(), hits


def _unit(status, detail=""):
    return report.Record(report.Unit("src", "part", "k"), status, detail)


def test_shares_and_the_weighted_overall():
    full = report.Tally("full", patched=100, records=[_unit("equal")] * 85 + [_unit("within ulp")] * 5
                        + [_unit("not verified", "x")] * 10)
    assert report.share(full) == (0.9, 0.9, 0.9)  # every kernel run: exact
    sampled = report.Tally("sampled", patched=300, sampled=True, records=[_unit("equal")] * 30)
    s, lo, hi = report.share(sampled)
    assert s == 1.0 and hi == 1.0 and math.isclose(lo, 30 / (30 + 1.959964 ** 2), rel_tol=1e-6)
    s, lo, hi = report.overall([full, sampled])
    assert math.isclose(s, (90 + 300) / 400)
    assert math.isclose(lo, (90 + 300 * 30 / (30 + 1.959964 ** 2)) / 400, rel_tol=1e-6) and math.isclose(hi, s)
    # two sampled corpora: each interval at the Bonferroni level 97.5%
    z = 2.241403
    s, lo, hi = report.overall([sampled, sampled])
    assert math.isclose(lo, 30 / (30 + z * z), rel_tol=1e-5)


def test_reasons_are_grouped_without_addresses():
    t = report.Tally("t", records=[_unit("not verified", "original: cannot emulate v_foo at 0x1234"),
                                   _unit("not verified", "original: cannot emulate v_foo at 0x5678"),
                                   _unit("not verified", "original: cannot emulate v_bar at 0x10"),
                                   _unit("different", "run 1 (grid 256x256): arg2: 4 bytes differ")])
    assert t.reasons("not verified") == {"original: cannot emulate v_foo at ADDR": 2,
                                         "original: cannot emulate v_bar at ADDR": 1}
    assert t.counts() == {"equal": 0, "within ulp": 0, "different": 1, "not verified": 3}


def test_a_corpus_is_counted_from_apply_and_verify(tmp_path):
    """Three kernels apply (by its cached document) says it patched: equal, DIFFERENT, not verified."""
    src = str(tmp_path / "vecops.hsaco")
    shutil.copy(os.path.join(FIXTURES, "vecops.hip.gfx1030.v4.hsaco"), src)
    data = read(src)
    bad = mutate(data, "vec_add", lambda i: i.mnemonic == "global_load_dword",
                 lambda i: with_field(i, F.FLAT, "offset", i.field("offset") ^ 4))
    cache = tmp_path / "cache"
    cache.mkdir()
    base = cache / f"{report.source_hash(src)}-vecops.hsaco"
    base.write_bytes(bad)
    kernels = [{"name": n, "status": "patched"} for n in ("vec_add", "block_reduce", "not_there")]
    kernels.append({"name": "other", "status": "refused", "reason": "r"})
    (cache / (base.name + ".json")).write_text(json.dumps({"parts": [{"uri": "file://" + src, "kernels": kernels}],
                                                           "errors": []}))
    t = report.run_corpus("t", [report.Source(src)], n=None, seed=0, runs=1, limit=100_000, cache=str(cache))
    assert t.patched == 3 and not t.errors
    got = {r.unit.kernel: r.status for r in t.records}
    assert got == {"vec_add": "different", "block_reduce": "equal", "not_there": "not verified"}
    assert t.counts() == {"equal": 1, "within ulp": 0, "different": 1, "not verified": 1}
    # sampled: two of the three, the same two for the same seed
    t2 = report.run_corpus("t", [report.Source(src)], n=2, seed=5, runs=1, limit=100_000, cache=str(cache))
    assert t2.patched == 3 and len(t2.records) == 2
    assert [r.unit for r in t2.records] == report.sample([r.unit for r in t.records], 2, 5)
    lines = "\n".join(report.show(t2))
    assert "patched kernels 3, run 2 (sampled)" in lines and "95% Wilson interval" in lines


def test_cached_only_leaves_out_sources_not_applied(tmp_path):
    """--cached-only: a source with no cached apply is named, not applied, its kernels not counted."""
    src = str(tmp_path / "vecops.hsaco")
    shutil.copy(os.path.join(FIXTURES, "vecops.hip.gfx1030.v4.hsaco"), src)
    t = report.run_corpus("t", [report.Source(src)], n=None, seed=0, runs=1, limit=1000, cache=str(tmp_path / "c"),
                          cached_only=True)
    assert t.patched == 0 and t.records == [] and t.skipped == [src]
    assert not os.listdir(tmp_path / "c")
    assert "not applied yet (--cached-only)" in "\n".join(report.show(t))
