"""`kpatch run`: the environment, exit status and signals, steering, the
summary, and end to end through a ROCr stand-in (tests/delivery/rocr_sim.py)
that dlopens the hook from HSA_TOOLS_LIB and loads objects as HIP does."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse

import pytest

from kpatch.delivery import hooklib, run as runmod
from tests.conftest import ROOT, run_kpatch

SIM = os.path.join(ROOT, "tests", "delivery", "rocr_sim.py")
FIXTURE_DB = os.path.join(ROOT, "tests", "fixtures", "miopen", "gfx1030.kdb")
MANIFEST = os.path.join(ROOT, "tests", "fixtures", "miopen", "MANIFEST.json")
ENV_KEYS = ["HSA_OVERRIDE_GFX_VERSION", "HSA_TOOLS_LIB", "HSA_TOOLS_ROCPROFILER_V1_TOOLS", "KPATCH_CACHE_DIR",
            "KPATCH_MODE", "KPATCH_PYTHON", "KPATCH_LOG", "KPATCH_STRICT"]
PRINT_ENV = f"import os, json; print(json.dumps({{k: os.environ.get(k) for k in {ENV_KEYS!r}}}))"


def _env(p) -> dict:
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_run_sets_the_environment_and_returns_the_status(tmp_path):
    p = run_kpatch("run", "--mode", "override", "--strict", "--cache", str(tmp_path / "c"), "--log",
                   str(tmp_path / "l.jsonl"), "--", sys.executable, "-c", PRINT_ENV + "; raise SystemExit(7)",
                   env={"HSA_TOOLS_LIB": "/opt/x/libtracer.so", "HSA_OVERRIDE_GFX_VERSION": ""})
    assert p.returncode == 7, p.stderr
    env = _env(p)
    assert env["HSA_OVERRIDE_GFX_VERSION"] == "10.3.0"
    assert env["HSA_TOOLS_LIB"] == "/opt/x/libtracer.so " + hooklib.hook_library_path()
    assert env["HSA_TOOLS_ROCPROFILER_V1_TOOLS"] == "1"
    assert env["KPATCH_CACHE_DIR"] == str(tmp_path / "c") and env["KPATCH_MODE"] == "override"
    assert env["KPATCH_LOG"] == str(tmp_path / "l.jsonl") and env["KPATCH_STRICT"] == "1"
    assert os.path.isabs(env["KPATCH_PYTHON"])
    assert "log: " + str(tmp_path / "l.jsonl") in p.stderr


def test_harden_mode_sets_no_override(tmp_path):
    p = run_kpatch("run", "--mode", "harden", "--cache", str(tmp_path), "--", sys.executable, "-c", PRINT_ENV,
                   env={"HSA_OVERRIDE_GFX_VERSION": ""})
    assert p.returncode == 0, p.stderr
    env = _env(p)
    assert env["KPATCH_MODE"] == "harden" and env["HSA_OVERRIDE_GFX_VERSION"] == "" and env["KPATCH_STRICT"] is None


def test_without_a_gfx1010_or_mode_it_says_what_the_modes_do(tmp_path):
    if any(n.gfx_target_version == 100100 for n in runmod.read_gpu_nodes()):
        pytest.skip("this machine has a gfx1010")
    p = run_kpatch("run", "--cache", str(tmp_path), "--", sys.executable, "-c", "print(1)",
                   env={"HSA_OVERRIDE_GFX_VERSION": ""})
    assert p.returncode == 2 and "--mode override" in p.stderr and "HSA_OVERRIDE_GFX_VERSION" in p.stderr
    assert "Traceback" not in p.stderr and p.stdout == ""


def test_tool_names_are_quoted_as_rocr_splits_them():
    from tests.delivery.rocr_sim import tool_names
    v = runmod.tools_lib_value("a.so b.so", "/my dir/hook.so")
    assert tool_names(v) == ["a.so", "b.so", "/my dir/hook.so"]
    assert runmod.tools_lib_value(v, "/my dir/hook.so") == v


# ROCr's parse_tool_names (runtime.cpp), traced by hand from its source: the text
# before an opening quote is dropped, a closing quote ends a name, every unquoted
# space ends one (empty too)
ROCR_SPLITS = [("a.so b.so", ["a.so", "b.so"]), ("a.so  b.so", ["a.so", "", "b.so"]),
               ('"my dir/a.so" b.so', ["my dir/a.so", "", "b.so"]), ('x"a b"c', ["a b", "c"]),
               ("a\\ b.so", ["a b.so"]), ('a\\"b', ['a"b']), ('"open quote a', ["open quote a"]),
               ("a.so ", ["a.so"]), (" a.so", ["", "a.so"])]


@pytest.mark.parametrize("value,names", ROCR_SPLITS)
def test_the_rocr_stand_in_and_kpatch_split_as_rocr_does(value, names):
    from tests.delivery.rocr_sim import tool_names
    assert tool_names(value) == names
    assert runmod.parse_tool_names(value) == names


@pytest.mark.parametrize("existing", ['"unclosed a.so', "a.so\\", 'x"a b"c', "a.so  b.so", "\\"])
def test_the_hook_is_its_own_name_whatever_the_existing_value(existing):
    from tests.delivery.rocr_sim import tool_names
    hook = '/my "dir"/hook\\.so'
    v = runmod.tools_lib_value(existing, hook)
    names = tool_names(v)                     # never hangs, never swallows the hook
    assert names[-1] == hook and names.count(hook) == 1 and "" not in names


def test_kpatch_reads_hsa_tools_lib_as_the_rocr_stand_in_does():
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    from tests.delivery.rocr_sim import WouldHang, tool_names

    @hypothesis.given(st.text(alphabet='ab/ "\\', max_size=24))
    @hypothesis.settings(max_examples=400, deadline=None)
    def check(value):
        try:
            expected = tool_names(value)
        except WouldHang:
            return
        assert runmod.parse_tool_names(value) == expected
        v = runmod.tools_lib_value(value, "/h k.so")
        assert tool_names(v) == [n for n in expected if n] + (["/h k.so"] if "/h k.so" not in expected else [])

    check()


def test_a_signal_ends_the_child_as_a_shell_reports_it(tmp_path):
    p = run_kpatch("run", "--mode", "override", "--cache", str(tmp_path), "--", sys.executable, "-c",
                   "import os, signal; os.kill(os.getpid(), signal.SIGTERM)")
    assert p.returncode == 128 + signal.SIGTERM, p.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_sent_to_kpatch_reaches_the_child_and_kpatch_waits(tmp_path, sig):
    ready, done = tmp_path / "ready", tmp_path / "done"
    prog = (f"import signal, time, pathlib\n"
            f"def h(n, f):\n    time.sleep(0.5); pathlib.Path({str(done)!r}).write_text(str(n)); raise SystemExit(42)\n"
            f"signal.signal({int(sig)}, h)\npathlib.Path({str(ready)!r}).write_text('')\ntime.sleep(60)\n")
    e = dict(os.environ, KPATCH_NO_PROGRESS="1")
    proc = subprocess.Popen([sys.executable, "-m", "kpatch", "run", "--mode", "override", "--cache", str(tmp_path),
                             "--", sys.executable, "-c", prog], env=e, stderr=subprocess.PIPE, text=True)
    t0 = time.time()
    while not ready.exists() and time.time() - t0 < 60:
        time.sleep(0.05)
    proc.send_signal(sig)
    err = proc.communicate(timeout=60)[1]
    assert done.read_text() == str(int(sig)), err
    assert proc.returncode == 42, err


def _write_record(cache_dir, key, mode, status, kernels, reason=""):
    """A record file as the shared design spells it (line 1 for C, line 2 JSON)."""
    d = cache_dir / "objects" / key[:2]
    d.mkdir(parents=True, exist_ok=True)
    info = {"key": key, "mode": mode, "size": 100, "target": "gfx1030", "status": status, "kernels": kernels,
            "reason": reason, "kpatch_version": "0.1.0", "created": "2026-01-01T00:00:00Z"}
    (d / f"{key}.{mode}.rec").write_text(f"kpatch-cache 1 {status} 0 -\n" + json.dumps(info) + "\n")


def test_summary_from_a_hand_written_log_and_cache(tmp_path):
    cache_dir = tmp_path / "c"
    kr, kp, ke = "a" * 32, "b" * 32, "c" * 32
    _write_record(cache_dir, kr, "override", "refused",
                  [{"name": "miopenSp3AsmConv_v30_3_1_gfx10_fp16_dot2_f2x3_stride1", "outcome": "refused",
                    "reasons": ["UnsupportedInstruction at 0x10: v_dot2_f32_f16 (approximation: "
                                "--allow-approx dot2-fma-mix)"]}])
    log = tmp_path / "log.jsonl"
    rows = [{"api": "OnLoad", "action": "hooked", "key": None},
            {"api": "from_memory", "key": kr, "size": 100, "target": "gfx1030", "action": "refused", "cache": "miss"},
            {"api": "from_memory", "key": kr, "size": 100, "target": "gfx1030", "action": "refused", "cache": "hit"},
            {"api": "from_memory", "key": kp, "size": 100, "target": "gfx1030", "action": "patched", "cache": "hit"},
            {"api": "from_file", "key": ke, "size": 5, "target": "gfx1030", "action": "error", "cache": "miss",
             "reason": "patcher timed out"},
            {"api": "from_memory", "key": None, "size": 9, "target": None, "action": "not-amdgpu", "cache": None}]
    log.write_text("\n".join(json.dumps(r) for r in rows) + "\n{\"truncated\n")
    lines, bad = runmod.read_log(str(log))
    s = runmod.summarize(lines, str(cache_dir), "override", str(log), bad)
    assert s["loads"] == 5 and s["cache_hits"] == 2 and s["unreadable_log_lines"] == 1
    assert s["actions"]["refused"] == {"loads": 2, "objects": 1}
    assert s["actions"]["patched"]["objects"] == 1 and s["actions"]["error"]["objects"] == 1
    text = "\n".join(runmod.summary_text(s))
    assert "1 patched, 0 partial, 0 already safe, 1 refused, 1 error(s), 2 cache hit(s)" in text
    assert ("kernel miopenSp3AsmConv_v30_3_1_gfx10_fp16_dot2_f2x3_stride1 refused: "
            "UnsupportedInstruction at 0x10: v_dot2_f32_f16") in text
    # `kpatch run` has no --allow-approx: the hint names the command that has it
    assert "`kpatch apply --allow-approx dot2-fma-mix` on the library" in text
    assert "(approximation: --allow-approx" not in text
    assert "patcher timed out" in text and str(log) in text


def test_run_steers_miopen_from_the_caches_refusals_and_keeps_the_users_choice(tmp_path):
    cache_dir = tmp_path / "c"
    _write_record(cache_dir, "d" * 32, "override", "refused",
                  [{"name": "miopenSp3AsmConv_v30_3_1_gfx10_fp16_dot2_f2x3_stride2", "outcome": "refused",
                    "reasons": ["v_dot2"]}, {"name": "x", "outcome": "patched", "reasons": []}])
    prog = "import os; print(os.environ.get('MIOPEN_DEBUG_AMD_WINOGRAD_RXS_F2X3'), os.environ.get('MIOPEN_DEBUG_AMD_WINOGRAD_RXS_F2X3_G1'))"
    p = run_kpatch("run", "--mode", "override", "--cache", str(cache_dir), "--", sys.executable, "-c", prog,
                   env={"MIOPEN_DEBUG_AMD_WINOGRAD_RXS_F2X3": "1"})
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["1", "0"]
    assert "set MIOPEN_DEBUG_AMD_WINOGRAD_RXS_F2X3_G1=0" in p.stderr
    assert "kept MIOPEN_DEBUG_AMD_WINOGRAD_RXS_F2X3=1" in p.stderr
    q = run_kpatch("run", "--mode", "override", "--no-steer", "--cache", str(cache_dir), "--", sys.executable, "-c",
                   prog)
    assert q.stdout.split() == ["None", "None"] and "MIOPEN_DEBUG" not in q.stderr


def _extract(name, tmp_path) -> str:
    e = [e for e in json.load(open(MANIFEST))["dbs"]["gfx1030.kdb"]["entries"] if e["kernel_name"] == name][0]
    uri = ("kdb://" + urllib.parse.quote(FIXTURE_DB) + "?name=" + urllib.parse.quote(name, safe="")
           + "&args=" + urllib.parse.quote(e["kernel_args"], safe=""))
    out = str(tmp_path / name)
    assert run_kpatch("extract", uri, "-o", out).returncode == 0
    return out


def test_end_to_end_through_the_hook(tmp_path):
    """kpatch run -- python rocr_sim.py OBJECTS: the runtime's entry receives
    `kpatch apply FILE --mode override` of the fp32 Winograd object, the
    refused fp16 dot2 one unchanged, a non-AMDGPU file unchanged; the summary
    names the patched and refused objects; a second run is all cache hits
    and steers MIOpen off the refused kernel's solver."""
    patched_src = _extract("Conv_Winograd_v30_3_1_fp32_f2x3_stride1.s.o", tmp_path)
    refused_src = _extract("Conv_Winograd_v30_3_1_fp16_dot2_f3x2_stride1.s.o", tmp_path)
    other = tmp_path / "notes.txt"
    other.write_bytes(b"not a code object\n" * 10)
    want = tmp_path / "want.co"
    assert run_kpatch("apply", patched_src, "-o", str(want), "--mode", "override").returncode == 0
    md5 = lambda path: hashlib.md5(open(path, "rb").read()).hexdigest()  # noqa: E731
    cache_dir = tmp_path / "cache"
    args = ("run", "--mode", "override", "--cache", str(cache_dir), "--json", "--", sys.executable, SIM,
            patched_src, refused_src, str(other))
    p = run_kpatch(*args)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    assert got["onload"] is True
    assert [r["md5"] for r in got["received"]] == [md5(want), md5(refused_src), md5(other)]
    s = json.loads(p.stderr.strip().splitlines()[-1])
    assert s["actions"]["patched"]["objects"] == 1 and s["actions"]["refused"]["objects"] == 1
    assert s["actions"]["not-amdgpu"]["loads"] == 1 and s["cache_misses"] == 2 and s["cache_hits"] == 0
    assert [k["name"] for d in s["objects"] for k in d["refused_kernels"]] == [
        "miopenSp3AsmConv_v30_3_1_gfx10_fp16_dot2_f3x2_stride1"]
    p2 = run_kpatch(*args)
    s2 = json.loads(p2.stderr.strip().splitlines()[-1])
    assert s2["cache_hits"] == 2 and s2["cache_misses"] == 0
    assert [x["env"] for x in s2["steering"]] == ["MIOPEN_DEBUG_AMD_WINOGRAD_RXS_F3X2"]
    assert json.loads(p2.stdout)["received"] == got["received"]
    # --strict: the refused object fails to load (the runtime's entry never sees it)
    p3 = run_kpatch(*args[:1], "--strict", *args[1:])
    got3 = json.loads(p3.stdout)["received"]
    assert got3[1]["md5"] is None and got3[1]["status"] != 0 and got3[0]["md5"] == md5(want)
