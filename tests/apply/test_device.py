"""Default mode and CU count from the environment and a fake KFD sysfs tree."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kpatch.errors import UsageError
from kpatch.miopen.device import KFD_NODES, _properties, detect_cu, detect_mode, processor_name, read_gpu_nodes

from kpatch.data import sample_db_path

from .conftest import FakePatcher, invoke, python_cli

CPU_NODE = "cpu_cores_count 12\nsimd_count 0\ngfx_target_version 0\n"


def gpu_node(gfx: int, simds: int, per_cu: int = 2) -> str:
    # the shape of a real KFD properties file: one "key value" per line
    return (f"cpu_cores_count 0\nsimd_count {simds}\nmem_banks_count 1\nsimd_per_cu {per_cu}\n"
            f"gfx_target_version {gfx}\nvendor_id 4098\ndevice_id 29471\nmax_waves_per_simd 20\n")


def sysfs(tmp_path, *nodes: str) -> str:
    root = tmp_path / "sys"
    for i, text in enumerate(nodes):
        d = root / KFD_NODES / str(i)
        d.mkdir(parents=True)
        (d / "properties").write_text(text)
    return str(root)


def test_processor_names():
    # major*10000 + minor*100 + stepping, minor and stepping written in hex
    assert processor_name(100100) == "gfx1010"
    assert processor_name(100300) == "gfx1030"
    assert processor_name(90010) == "gfx90a"
    assert processor_name(90400) == "gfx940"


def test_rx5600xt_native(tmp_path):
    nodes = read_gpu_nodes(sysfs(tmp_path, CPU_NODE, gpu_node(100100, 72)))
    assert [n.node for n in nodes] == ["1"]  # the CPU node has no SIMDs
    assert detect_mode({}, nodes).value == "native"
    cu = detect_cu(None, {}, nodes)
    assert cu.value == 18  # 72 SIMDs / 2 per CU = 36 CUs, HIP reports WGPs: 18
    assert "36 CUs" in cu.why


def test_override_wins_over_sysfs(tmp_path):
    nodes = read_gpu_nodes(sysfs(tmp_path, CPU_NODE, gpu_node(100100, 80)))
    choice = detect_mode({"HSA_OVERRIDE_GFX_VERSION": "10.3.0"}, nodes)
    assert choice.value == "override" and "HSA_OVERRIDE_GFX_VERSION" in choice.why
    assert detect_cu(None, {}, nodes).value == 20  # RX 5700 XT: 40 CUs


def test_unknown_override_value_asks_for_mode(tmp_path):
    with pytest.raises(UsageError, match="--mode"):
        detect_mode({"HSA_OVERRIDE_GFX_VERSION": "10.1.0"}, [])


def test_no_gfx1010_asks_for_mode(tmp_path):
    nodes = read_gpu_nodes(sysfs(tmp_path, CPU_NODE, gpu_node(100300, 160)))
    with pytest.raises(UsageError, match="--mode") as e:
        detect_mode({}, nodes)
    assert "gfx1030" in e.value.reason
    with pytest.raises(UsageError, match="--mode"):
        detect_mode({}, read_gpu_nodes(str(tmp_path / "no-such-sysfs")))


def test_cu_sources_in_order(tmp_path):
    nodes = read_gpu_nodes(sysfs(tmp_path, gpu_node(100100, 72)))
    assert detect_cu(7, {"MIOPEN_DEVICE_CU": "9"}, nodes).value == 7
    assert detect_cu(None, {"MIOPEN_DEVICE_CU": "9"}, nodes).value == 9  # MIOpen's own override
    with pytest.raises(UsageError, match="MIOPEN_DEVICE_CU"):
        detect_cu(None, {"MIOPEN_DEVICE_CU": "lots"}, nodes)
    with pytest.raises(UsageError, match="--cu"):
        detect_cu(None, {}, [])
    with pytest.raises(UsageError):
        detect_cu(0, {}, nodes)


def test_several_gpus(tmp_path):
    mixed = read_gpu_nodes(sysfs(tmp_path, gpu_node(100100, 72), gpu_node(100300, 160)))
    assert detect_cu(None, {}, mixed).value == 18  # the gfx1010 one
    two = read_gpu_nodes(sysfs(tmp_path / "b", gpu_node(100100, 72), gpu_node(100100, 80)))
    with pytest.raises(UsageError, match="--cu"):
        detect_cu(None, {}, two)


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=300))
def test_properties_parser_takes_any_bytes(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("props") / "properties"
    path.write_bytes(data)
    assert isinstance(_properties(str(path)), dict)


def test_cli_default_mode_and_cu_from_fake_sysfs(tmp_path, monkeypatch):
    """`kpatch apply` with neither --mode nor --cu reads the (fake) KFD tree;
    native mode writes gfx1010_<CU>.ukdb.  --dry-run: nothing is written."""
    root = sysfs(tmp_path, CPU_NODE, gpu_node(100100, 72))
    out = tmp_path / "out"
    out.mkdir()
    patcher = FakePatcher()
    code, stdout, stderr, exc = invoke(monkeypatch, ["apply", "--db", sample_db_path(), "--out-dir", str(out),
                                                     "--dry-run", "--json"],
                                       env={"KPATCH_SYSFS_ROOT": root}, patcher=patcher)
    assert exc is None and code == 0, stderr
    doc = json.loads(stdout)
    assert doc["mode"] == "native" and doc["cu"] == 18
    assert doc["output"] == str(out / "gfx1010_18.ukdb")
    assert all(m == "native" for m, _ in patcher.calls) and patcher.calls
    assert os.listdir(out) == []


def test_cli_without_any_hint_asks_for_mode(tmp_path):
    p = python_cli("apply", "--db", "x.kdb", "--out-dir", str(tmp_path),
                   env={"KPATCH_SYSFS_ROOT": str(tmp_path / "none")})
    assert p.returncode == 2
    assert "--mode" in p.stderr and p.stderr.count("\n") == 1
