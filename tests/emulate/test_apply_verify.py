"""`kpatch apply --verify-emulate`: every object apply patches is compared
with its original in the emulator; per kernel the verdict is reported, and
an object with a DIFFERENT kernel is not written (its kernels refused, exit
status 1, --json says so).

The wrong patch is made here: the patch function apply uses is replaced
(monkeypatch) by one that patches as kpatch does and then moves vec_add's
first global load by 4 bytes, as a fix with a wrong offset would.
"""

from __future__ import annotations

import json
import os
import sqlite3

import pytest
from click.testing import CliRunner

import kpatch.cli.apply as cli_apply
from kpatch.rewrite.outcome import PatchResult
from kpatch.codeobject import CodeObject
from kpatch.isa import formats as F

from tests.emulate.common import FIXTURES, kpatch, mutate, with_field

VECOPS = os.path.join(FIXTURES, "vecops.hip.gfx1030.v4.hsaco")


def _apply(*args: str):
    return CliRunner().invoke(cli_apply.apply_cmd, list(args), catch_exceptions=False)


@pytest.fixture
def wrong_offset(monkeypatch):
    real = cli_apply.default_patch_fn

    def factory(mode):
        inner = real(mode)

        def patch(data, **kw):
            r = inner(data, **kw)
            if r.data is None or CodeObject.from_bytes(r.data).kernel("vec_add") is None:
                return r
            bad = mutate(r.data, "vec_add", lambda i: i.mnemonic == "global_load_dword",
                         lambda i: with_field(i, F.FLAT, "offset", i.field("offset") ^ 4))
            return PatchResult(bad, r.kernels)
        return patch
    monkeypatch.setattr(cli_apply, "default_patch_fn", factory)


def test_each_patched_kernel_gets_its_verdict(tmp_path):
    out = str(tmp_path / "vecops.hsaco")
    p = kpatch("apply", "--mode", "override", "--verify-emulate", "--json", VECOPS, "-o", out)
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads(p.stdout)
    assert doc["verify_emulate"] == {"equal": 2, "within ulp": 0, "different": 0, "not verified": 0}
    kernels = {k["name"]: k for part in doc["parts"] for k in part["kernels"]}
    assert set(kernels) == {"vec_add", "block_reduce"}
    assert all(k["status"] == "patched" and "verify --emulate: equal" in k["reason"] for k in kernels.values())
    assert all(k["verified"] == "equal" for k in kernels.values())
    assert os.path.exists(out)
    p = kpatch("apply", "--mode", "override", "--verify-emulate", VECOPS, "-o", str(tmp_path / "again.hsaco"))
    assert "patched   " in p.stdout and "vec_add [KH004]: verify --emulate: equal" in p.stdout, p.stdout
    assert "verify --emulate: kernels 2 equal, 0 within ulp, 0 different" in p.stdout


def test_a_wrong_patch_is_not_written(tmp_path, wrong_offset):
    out = str(tmp_path / "vecops.hsaco")
    r = _apply("--mode", "override", "--verify-emulate", "--json", VECOPS, "-o", out)
    assert r.exit_code == 1, r.output
    doc = json.loads(r.stdout)
    assert doc["verify_emulate"]["different"] == 1 and doc["written"] in (False, None, 0, "")
    kernels = {k["name"]: k for part in doc["parts"] for k in part["kernels"]}
    assert kernels["vec_add"]["status"] == "refused" and "verify --emulate: different" in kernels["vec_add"]["reason"]
    assert kernels["block_reduce"]["status"] == "refused" and "vec_add" in kernels["block_reduce"]["reason"]
    assert (kernels["vec_add"]["verified"], kernels["block_reduce"]["verified"]) == ("different", "equal")
    # the object emulation refused is counted refused, not unchanged
    assert [p["status"] for p in doc["parts"]] == ["refused"] and "vec_add is different" in doc["parts"][0]["reason"]
    assert (doc["summary"]["refused"], doc["summary"]["unchanged"], doc["summary"]["changed"]) == (1, 0, 0)
    text = _apply("--mode", "override", "--verify-emulate", VECOPS, "-o", out).stdout
    assert "1 files: 0 changed, 0 unchanged, 1 refused, 0 errors" in text, text
    assert not os.path.exists(out)
    # without the check the same wrong patch is written: the check is what refused it
    r = _apply("--mode", "override", VECOPS, "-o", out)
    assert r.exit_code == 0 and os.path.exists(out), r.output


def test_a_wrong_patch_writes_no_row_into_the_user_db(tmp_path, wrong_offset):
    """--db: the entry holding vec_add is refused, the other entries are written."""
    r = _apply("--mode", "override", "--cu", "18", "--out-dir", str(tmp_path), "--verify-emulate", "--json",
               "--db", "@sample")
    assert r.exit_code == 1, r.output
    doc = json.loads(r.stdout)
    assert doc["verify_emulate"]["different"] == 1
    refused = [e for e in doc["entries"] if any(k["name"] == "vec_add" for k in e["kernels"])]
    assert refused and all(e["status"] == "refused" for e in refused), [e["status"] for e in refused]
    assert doc["summary"]["refused"] == len(refused)
    with sqlite3.connect(os.path.join(tmp_path, "gfx1030_18.ukdb")) as db:
        names = {n for (n,) in db.execute("SELECT kernel_name FROM kern_db")}
    assert "vecops.cpp.o" not in names and names


def test_emulation_counts_read_the_verdict_field_not_the_reason():
    """The counts come from KernelOutcome.verified; a reason that merely
    reads like a verdict is not one."""
    from kpatch.cli.verify import emulation_counts
    from kpatch.rewrite.outcome import KernelOutcome
    ks = [KernelOutcome("a", "patched", "verify --emulate: equal", verified="equal"),
          KernelOutcome("b", "patched", "something; verify --emulate: equal"),
          KernelOutcome("c", "refused", "x", verified="different"),
          KernelOutcome("d", "patched", "", verified="not verified")]
    assert emulation_counts(ks) == {"equal": 1, "within ulp": 0, "different": 1, "not verified": 1}
    assert KernelOutcome("a", "patched", verified="within ulp").to_json()["verified"] == "within ulp"
