"""`kpatch warm` fills the cache so `kpatch run` finds cache hits; `kpatch cache show|prune`."""

from __future__ import annotations

import json
import sys

from tests.conftest import run_kpatch
from tests.delivery.test_run import SIM, _extract


def test_warm_then_run_is_all_cache_hits_and_cache_show_prune(tmp_path):
    objs = [_extract(n, tmp_path) for n in ("Conv_Winograd_v30_3_1_fp32_f2x3_stride1.s.o",
                                            "Conv_Winograd_v30_3_1_fp16_dot2_f3x2_stride1.s.o")]
    src = tmp_path / "objs"
    src.mkdir()
    for o in objs:
        (src / o.split("/")[-1]).write_bytes(open(o, "rb").read())
    (src / "notes.txt").write_text("not a code object")
    cdir = str(tmp_path / "cache")
    p = run_kpatch("warm", "--cache", cdir, "--json", str(src))
    assert p.returncode == 0, p.stderr
    w = json.loads(p.stdout)
    assert w["new"] == {"patched": 1, "refused": 1} and w["already_cached"] == {}
    assert [r["kernel"] for r in w["refusals"]] == ["miopenSp3AsmConv_v30_3_1_gfx10_fp16_dot2_f3x2_stride1"]
    again = json.loads(run_kpatch("warm", "--cache", cdir, "--json", str(src)).stdout)
    assert again["new"] == {} and again["already_cached"] == {"patched": 1, "refused": 1}
    r = run_kpatch("run", "--mode", "override", "--cache", cdir, "--json", "--", sys.executable, SIM, *objs)
    s = json.loads(r.stderr.strip().splitlines()[-1])
    assert s["cache_hits"] == 2 and s["cache_misses"] == 0, r.stderr
    show = json.loads(run_kpatch("cache", "show", "--cache", cdir, "--json").stdout)
    assert show["entries"] == 2 and show["by_status"] == {"override/patched": 1, "override/refused": 1}
    assert show["refusals"][0]["kernel"] == "miopenSp3AsmConv_v30_3_1_gfx10_fp16_dot2_f3x2_stride1"
    assert run_kpatch("cache", "prune", "--cache", cdir).returncode == 2
    outside = tmp_path / "keep.txt"
    outside.write_text("x")
    pr = run_kpatch("cache", "prune", "--all", "--cache", cdir, "--json")
    assert json.loads(pr.stdout)["removed"] == 2 and outside.read_text() == "x"
    assert json.loads(run_kpatch("cache", "show", "--cache", cdir, "--json").stdout)["entries"] == 0


def test_warm_reports_an_unreadable_path_and_goes_on(tmp_path):
    p = run_kpatch("warm", "--cache", str(tmp_path / "c"), str(tmp_path / "missing.kdb"))
    assert p.returncode == 1 and "error:" in p.stderr and "Traceback" not in p.stderr


def test_warm_reports_a_code_object_it_cannot_read(tmp_path):
    """A file that looks like a code object (ELF magic) but cannot be read
    is an error naming it (exit 1), not "another target skipped"; the
    readable one beside it is still patched into the cache."""
    import os

    from tests.conftest import FIXTURES

    good = os.path.join(FIXTURES, "vecops.hip.gfx1030.v5.hsaco")
    trunc = tmp_path / "trunc.co"
    trunc.write_bytes(open(good, "rb").read()[:3000])
    p = run_kpatch("warm", "--cache", str(tmp_path / "c"), "--json", str(trunc), good)
    assert p.returncode == 1, p.stderr
    doc = json.loads(p.stdout)
    assert [e["item"] for e in doc["errors"]] == [f"file://{trunc}"]
    assert doc["other_targets"] == 0 and sum(doc["new"].values()) == 1
    assert p.stderr.startswith(f"error: file://{trunc}: ") and p.stderr.count("\n") == 1
