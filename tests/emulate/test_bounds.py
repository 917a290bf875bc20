"""Each approximation rule set states its bound (``max_ulp``), `kpatch
rules` shows it, and `kpatch verify --emulate` checks the measured
difference against the bound of the approximations the patched object's
provenance names (``--max-ulp`` overrides it).

legacy-fma-as-mad is measured on tests/emulate/data/legacy_fma_run.s: the
original's results must be numpy's fused a*b + c (computed in double, where
the product of two f32 is exact, then rounded once), the patched object's
numpy's unfused f32(f32(a*b) + c).
"""

from __future__ import annotations

import os
import tomllib

import numpy as np
import pytest

from kpatch.errors import FormatError
from kpatch.rewrite.rules import load_file

from tests.emulate.common import FIXTURES, assemble, kpatch, read

RULES = os.path.join(os.path.dirname(__file__), "..", "..", "rules")


def _approx(tmp_path, src: str, name: str) -> str:
    out = str(tmp_path / (os.path.basename(src) + ".approx"))
    p = kpatch("apply", "--mode", "override", "--allow-approx", name, src, "-o", out)
    assert p.returncode == 0, p.stdout + p.stderr
    return out


@pytest.mark.parametrize("name", ["dot2-fma-mix", "legacy-fma-as-mad"])
def test_each_approximation_states_its_bound_and_rules_shows_it(name):
    with open(os.path.join(RULES, f"{name}.toml"), "rb") as f:
        bound = tomllib.load(f)["set"]["max_ulp"]
    assert load_file(os.path.join(RULES, f"{name}.toml")).max_ulp == bound
    p = kpatch("rules", name)
    assert p.returncode == 0 and f"max_ulp = {bound}" in p.stdout, p.stdout + p.stderr


def test_an_approximation_without_a_bound_is_rejected(tmp_path):
    text = open(os.path.join(RULES, "dot2-fma-mix.toml")).read()
    bad = tmp_path / "nobound.toml"
    bad.write_text("\n".join(line for line in text.splitlines() if not line.startswith("max_ulp")))
    with pytest.raises(FormatError, match="max_ulp"):
        load_file(str(bad))
    exact = tmp_path / "exact.toml"
    exact.write_text(text.replace("approximation = true", "approximation = false"))
    with pytest.raises(FormatError, match="only an approximation"):
        load_file(str(exact))


def test_verify_checks_the_rules_own_bound(tmp_path):
    """dot2-fma-mix's half2_dot differs by a few ulp (two roundings): with
    no --max-ulp, verify takes the bound of the rule set the provenance
    names, passes it as "within ulp" and says whose bound it is."""
    src = os.path.join(FIXTURES, "mathops.hip.gfx1030.v4.hsaco")
    out = _approx(tmp_path, src, "dot2-fma-mix")
    with open(os.path.join(RULES, "dot2-fma-mix.toml"), "rb") as f:
        bound = tomllib.load(f)["set"]["max_ulp"]
    p = kpatch("verify", "--emulate", "--kernel", "half2_dot", src, out)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "within ulp    half2_dot" in p.stdout and f"within {bound} ulp (dot2-fma-mix)" in p.stdout, p.stdout


def test_legacy_fma_as_mad_is_measured_against_numpy_and_its_bound(tmp_path):
    from kpatch.emulate.dispatch import Machine
    from kpatch.emulate.launch import run
    src = assemble(tmp_path, "legacy_fma_run")
    out = _approx(tmp_path, src, "legacy-fma-as-mad")
    rng = np.random.default_rng(5)
    worst_same_sign = 0
    for _ in range(20):
        buf = np.zeros(512, np.uint32)
        buf[:96] = rng.integers(0, 1 << 32, 96, dtype=np.uint64).astype(np.uint32)
        a = run(read(src), "lfma_run", [buf.copy()], (32,), (32,)).array(0)
        b = run(read(out), "lfma_run", [buf.copy()], (32,), (32,),
                machine=Machine(read(out), target="gfx1010")).array(0)  # override mode keeps the gfx1030 label
        x, y, z = (((buf[32 * k:32 * k + 32] & 0x807FFFFF) | 0x3F800000).view(np.float32) for k in range(3))
        fused = (x.astype(np.float64) * y + z).astype(np.float32)
        unfused = (x * y).astype(np.float32) + z
        for base, (f, u) in ((256, (fused, unfused)),
                             (320, ((np.abs(x).astype(np.float64) * np.abs(y) + np.abs(z)).astype(np.float32),
                                    (np.abs(x) * np.abs(y)).astype(np.float32) + np.abs(z)))):
            assert (a[base:base + 32].view(np.float32) == f).all()  # the original: fused, rounded once
            assert (b[base:base + 32].view(np.float32) == u).all()  # gfx1010's MAD: product rounded first
        d = np.abs(a[320:352].astype(np.int64) - b[320:352].astype(np.int64))  # positive floats: ulps
        worst_same_sign = max(worst_same_sign, int(d.max()))
    with open(os.path.join(RULES, "legacy-fma-as-mad.toml"), "rb") as f:
        bound = tomllib.load(f)["set"]["max_ulp"]
    assert worst_same_sign <= bound
    # with cancellation the difference exceeds the bound: verify says DIFFERENT, --max-ulp overrides
    p = kpatch("verify", "--emulate", src, out)
    assert p.returncode == 1 and "DIFFERENT     lfma_run" in p.stdout, p.stdout + p.stderr
    p = kpatch("verify", "--emulate", "--max-ulp", str(1 << 20), src, out)
    assert p.returncode == 0 and "within ulp    lfma_run" in p.stdout, p.stdout + p.stderr
