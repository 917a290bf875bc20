"""`kpatch doctor`: what this system is, and what to do next.

Each finding is a :class:`Check`: a status (``ok`` / ``warning`` /
``problem``), a topic, one line of text and, where there is one, the exact
next command.  :func:`diagnose` gathers them from

* the KFD topology (``<sysfs>/class/kfd/kfd/topology/nodes/*/properties``,
  read by :mod:`kpatch.miopen.device`): processor, CUs, PCI device id; the
  card is named from libdrm's ``amdgpu.ids`` (device id + revision, the
  revision from the render node's ``device/revision``), else from
  :data:`KNOWN_CARDS`;
* the amdgpu kernel driver (``/sys/module/amdgpu``), ``/dev/kfd`` access,
  ``HSA_OVERRIDE_GFX_VERSION``;
* PyTorch as the user's Python sees it (``probe.py`` run by that Python:
  version, HIP version, install directory), and the ROCm libraries it
  really loads: the dynamic loader's search for ``libtorch_hip.so``'s
  ``DT_NEEDED`` names and theirs (:func:`resolve_library`: ``DT_RPATH``,
  ``LD_LIBRARY_PATH``, ``DT_RUNPATH`` with ``$ORIGIN``, ``ld.so.conf``,
  the default directories) -- a ROCm wheel bundles its own
  ``libamdhip64``, ``libhsa-runtime64``, ``libMIOpen``, ``librocblas``;
* MIOpen: its user cache directory (:mod:`kpatch.miopen.paths`) and
  the user DB name it will use, ``gfx1030_<CU/2>.ukdb`` under the override;
* kpatch: the hook library, the cache, and coverage: every gfx1030 code
  object the install carries (``torch/lib`` fat binaries, the rocBLAS
  library directory, MIOpen's system kernel DBs) looked up in the cache:
  patched / partial / already safe / refused / error / not yet seen.

The file-system root (``root``) and the environment are parameters, so the
tests run it on fake trees.
"""

from __future__ import annotations

import glob
import json
import os
import platform
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Callable, Mapping

import kpatch
from kpatch.errors import KpatchError, UsageError
from kpatch.miopen import device as devmod
from kpatch.miopen import paths as miopen_paths

PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "probe.py")
STATUSES = ("ok", "warning", "problem")
#: seconds the user's Python may take to import torch
PROBE_TIMEOUT = 120.0

#: Cards kpatch is for, and a few others, by PCI device id and revision, as
#: libdrm's amdgpu.ids names them (used when that file is not installed).
KNOWN_CARDS = {
    (0x731F, 0xC0): "AMD Radeon RX 5700 XT 50th Anniversary",
    (0x731F, 0xC1): "AMD Radeon RX 5700 XT",
    (0x731F, 0xC2): "AMD Radeon RX 5600M",
    (0x731F, 0xC3): "AMD Radeon RX 5700M",
    (0x731F, 0xC4): "AMD Radeon RX 5700",
    (0x731F, 0xC5): "AMD Radeon RX 5700 XT",
    (0x731F, 0xCA): "AMD Radeon RX 5600 XT",
    (0x731F, 0xCB): "AMD Radeon RX 5600 OEM",
    (0x7312, 0x00): "AMD Radeon Pro W5700",
    (0x73BF, 0xC0): "AMD Radeon RX 6900 XT",
    (0x73BF, 0xC1): "AMD Radeon RX 6800 XT",
    (0x73BF, 0xC3): "AMD Radeon RX 6800",
}
#: Navi 10 (gfx1010) by CU count, when the revision cannot be read.
NAVI10_BY_CUS = {36: "AMD Radeon RX 5600 XT or RX 5700 (Navi 10, 36 CUs)", 40: "AMD Radeon RX 5700 XT (Navi 10, 40 CUs)"}
AMDGPU_IDS = ("usr/share/libdrm/amdgpu.ids", "opt/amdgpu/share/libdrm/amdgpu.ids")

#: the ROCm libraries a PyTorch process loads, by the start of their file names
RUNTIME_LIBS = {"libamdhip64": "HIP runtime", "libhsa-runtime64": "HSA runtime (ROCr)", "libMIOpen": "MIOpen",
                "librocblas": "rocBLAS"}
#: the libraries of a ROCm PyTorch whose dependencies lead to them
TORCH_GPU_LIBS = ("libtorch_hip.so", "libc10_hip.so")
DEFAULT_LIB_DIRS = ("lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu", "lib64", "usr/lib64", "lib", "usr/lib")

GFX1010, GFX1030 = devmod.GFX1010_VERSION, devmod.GFX1030_VERSION


@dataclass
class Check:
    """One line of the doctor's output."""

    status: str  # ok | warning | problem
    topic: str
    text: str
    next: str | None = None

    def to_json(self) -> dict:
        return {"status": self.status, "topic": self.topic, "text": self.text, "next": self.next}


@dataclass
class Diagnosis:
    """Everything the doctor found: the checks in order, and the facts behind them."""

    checks: list[Check] = field(default_factory=list)
    facts: dict = field(default_factory=dict)

    def add(self, status: str, topic: str, text: str, next: str | None = None) -> Check:
        c = Check(status, topic, text, next)
        self.checks.append(c)
        return c

    @property
    def problems(self) -> int:
        return sum(c.status == "problem" for c in self.checks)

    def to_json(self) -> dict:
        return {"kpatch_version": kpatch.__version__, "checks": [c.to_json() for c in self.checks],
                "facts": self.facts,
                "counts": {s: sum(c.status == s for c in self.checks) for s in STATUSES}}


def text_lines(doc: dict) -> list[str]:
    """A diagnosis (its JSON) as the lines ``kpatch doctor`` prints."""
    width = max([len(c["topic"]) for c in doc["checks"]] + [8])
    out = []
    for c in doc["checks"]:
        out.append(f"{c['status']:<8} {c['topic']:<{width}}  {c['text']}")
        if c.get("next"):
            out.append(f"{'':<8} {'':<{width}}  next: {c['next']}")
    n = doc["counts"]
    out.append(f"{n['ok']} ok, {n['warning']} warning(s), {n['problem']} problem(s)")
    return out


# ------------------------------------------------------------------ the GPU

def _read(path: str, limit: int = 1 << 16) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(limit)
    except OSError:
        return None


def _int(text: str | None) -> int | None:
    try:
        return int((text or "").strip(), 0)
    except ValueError:
        return None


def amdgpu_ids(root: str) -> dict[tuple[int, int], str]:
    """libdrm's marketing names, (device id, revision) -> name, from the
    first ``amdgpu.ids`` under ``root`` ({} when none is installed)."""
    for rel in AMDGPU_IDS:
        text = _read(os.path.join(root, rel), 1 << 22)
        if text is None:
            continue
        out = {}
        for line in text.splitlines():
            parts = [p.strip() for p in line.split(",", 2)]
            if len(parts) == 3 and not line.startswith("#"):
                try:
                    out[(int(parts[0], 16), int(parts[1], 16))] = parts[2]
                except ValueError:
                    pass
        return out
    return {}


@dataclass
class Gpu:
    """A GPU node of KFD with what the doctor adds: PCI ids and a name."""

    node: devmod.GpuNode
    device_id: int | None
    revision: int | None
    name: str

    def to_json(self) -> dict:
        n = self.node
        return {"node": n.node, "processor": n.processor, "gfx_target_version": n.gfx_target_version,
                "compute_units": n.compute_units, "miopen_cu": n.miopen_cu,
                "device_id": f"0x{self.device_id:04x}" if self.device_id is not None else None,
                "revision": f"0x{self.revision:02x}" if self.revision is not None else None, "name": self.name}


def read_gpus(root: str) -> list[Gpu]:
    """The GPUs of the KFD topology under ``root``, named."""
    sysfs = os.path.join(root, "sys")
    names = amdgpu_ids(root)
    out = []
    for node in devmod.read_gpu_nodes(sysfs):
        props = devmod._properties(os.path.join(sysfs, devmod.KFD_NODES, node.node, "properties"))
        dev_id = props.get("device_id")
        minor = props.get("drm_render_minor")
        rev = None
        if minor is not None:
            rev = _int(_read(os.path.join(sysfs, "class", "drm", f"renderD{minor}", "device", "revision"), 64))
        name = None
        if dev_id is not None and rev is not None:
            name = names.get((dev_id, rev)) or KNOWN_CARDS.get((dev_id, rev))
        if name is None and dev_id == 0x731F:
            name = NAVI10_BY_CUS.get(node.compute_units or 0)
        if name is None:
            name = f"an AMD GPU ({node.processor})"
        out.append(Gpu(node, dev_id, rev, name))
    return out


def _gpu_text(g: Gpu) -> str:
    pci = f", PCI 1002:{g.device_id:04x}" if g.device_id is not None else ""
    rev = f" rev {g.revision:02x}" if g.revision is not None else ""
    return f"node {g.node.node}: {g.name} ({g.node.processor}, {g.node.compute_units} CUs{pci}{rev})"


# ------------------------------------------------------------------ PyTorch

@dataclass
class TorchProbe:
    """What ``probe.py`` reported, run by ``python``."""

    python: str
    info: dict | None  # the probe's JSON; None when the Python could not be run
    error: str | None = None

    @property
    def torch(self) -> dict | None:
        return (self.info or {}).get("torch")


def run_probe(python: str, env: Mapping[str, str], timeout: float = PROBE_TIMEOUT) -> TorchProbe:
    """Run ``probe.py`` with ``python``."""
    try:
        p = subprocess.run([python, PROBE], env=dict(env), capture_output=True, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        return TorchProbe(python, None, "not found")
    except PermissionError:
        return TorchProbe(python, None, "not executable")
    except subprocess.TimeoutExpired:
        return TorchProbe(python, None, f"did not finish within {timeout:.0f} s")
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    try:
        info = json.loads(lines[-1]) if lines else None
    except ValueError:
        info = None
    if not isinstance(info, dict):
        tail = (p.stderr.strip().splitlines() or ["no output"])[-1]
        return TorchProbe(python, None, f"exit status {p.returncode}: {tail}")
    return TorchProbe(python, info, info.get("error"))


def candidate_pythons(requested: str | None, env: Mapping[str, str]) -> list[str]:
    """The Pythons to try for torch: ``requested`` alone if given, else
    kpatch's own (``sys.executable``) and the ``python3`` on PATH."""
    if requested:
        return [requested]
    import shutil
    out = [sys.executable]
    found = shutil.which("python3", path=env.get("PATH", os.defpath))
    if found and os.path.realpath(found) != os.path.realpath(sys.executable):
        out.append(found)
    return out


def find_torch_python(requested: str | None, env: Mapping[str, str]) -> tuple[TorchProbe | None, list[TorchProbe]]:
    """(the first Python that imports torch, every probe made)."""
    tried = []
    for py in candidate_pythons(requested, env):
        pr = run_probe(py, env)
        tried.append(pr)
        if pr.torch is not None:
            return pr, tried
    return None, tried


# ------------------------------------------------------------------ the loader's search

def _dynamic(path: str) -> tuple[list[str], list[str], list[str]] | None:
    """(DT_NEEDED, DT_RPATH dirs, DT_RUNPATH dirs) of an ELF shared library, or None."""
    # pyelftools, not kpatch.elf: kpatch.elf.reader holds a whole file in memory
    # and reads no dynamic section; these are PyTorch's libraries (hundreds of
    # megabytes each), of which only .dynamic and its strings are wanted
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    try:
        with open(path, "rb") as f:
            elf = ELFFile(f)
            dyn = elf.get_section_by_name(".dynamic")
            if dyn is None:
                return [], [], []
            needed, rpath, runpath = [], [], []
            for tag in dyn.iter_tags():
                if tag.entry.d_tag == "DT_NEEDED":
                    needed.append(tag.needed)
                elif tag.entry.d_tag == "DT_RPATH":
                    rpath += tag.rpath.split(":")
                elif tag.entry.d_tag == "DT_RUNPATH":
                    runpath += tag.runpath.split(":")
            return needed, rpath, runpath
    except (OSError, ELFError, ValueError, KeyError, AttributeError):
        return None


def ld_so_conf_dirs(root: str) -> list[str]:
    """The directories ``/etc/ld.so.conf`` (and its ``include``s) name, as
    ldconfig reads them, under ``root``."""
    out: list[str] = []

    def read(path: str, depth: int) -> None:
        text = _read(path)
        if text is None or depth > 4:
            return
        for line in text.splitlines():
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            if line.startswith("include "):
                pattern = line[len("include "):].strip()
                if not pattern.startswith("/"):
                    pattern = os.path.join("/etc", pattern)
                for inc in sorted(glob.glob(os.path.join(root, pattern.lstrip("/")))):
                    read(inc, depth + 1)
            elif line.startswith("/"):
                out.append(line)

    read(os.path.join(root, "etc", "ld.so.conf"), 0)
    return out


def _expand(d: str, origin: str) -> str:
    return d.replace("${ORIGIN}", origin).replace("$ORIGIN", origin)


def resolve_library(name: str, requester: str, env: Mapping[str, str], root: str = "/") -> tuple[str | None, str]:
    """(path, how) of the library the dynamic loader opens for ``name``
    needed by ``requester``: DT_RPATH (when there is no DT_RUNPATH),
    LD_LIBRARY_PATH, DT_RUNPATH (``$ORIGIN`` = the requester's directory),
    the ld.so.conf directories, the default directories.  Paths from the
    ELF (other than ``$ORIGIN``) and from ld.so.conf are taken under ``root``
    (fake trees); ``$ORIGIN`` and LD_LIBRARY_PATH name real directories."""
    dyn = _dynamic(requester) or ([], [], [])
    origin = os.path.dirname(os.path.realpath(requester))
    _, rpath, runpath = dyn

    def rooted(d: str) -> str:
        return d if root in ("/", "") or d.startswith(root) else os.path.join(root, d.lstrip("/"))

    def elf_dir(d: str) -> str:  # $ORIGIN names a real directory; other absolute ones are under root
        return _expand(d, origin) if "ORIGIN" in d else rooted(d)

    order: list[tuple[str, str]] = []
    if not runpath:
        order += [(elf_dir(d), f"DT_RPATH of {os.path.basename(requester)}") for d in rpath if d]
    order += [(d, "LD_LIBRARY_PATH") for d in env.get("LD_LIBRARY_PATH", "").split(":") if d]
    order += [(elf_dir(d), f"DT_RUNPATH of {os.path.basename(requester)}") for d in runpath if d]
    order += [(rooted(d), "ld.so.conf") for d in ld_so_conf_dirs(root)]
    order += [(os.path.join(root, d), "default directory") for d in DEFAULT_LIB_DIRS]
    for d, how in order:
        p = os.path.join(d, name)
        if os.path.isfile(p):
            return p, how
    return None, "not found"


def runtime_libraries(torch_dir: str, env: Mapping[str, str], root: str = "/") -> dict[str, dict]:
    """The ROCm libraries (:data:`RUNTIME_LIBS`) PyTorch's GPU libraries lead
    the loader to: stem -> {"path", "how", "needed_by", "name"}; a library
    that is needed but not found has path None.  Without a readable
    ``libtorch_hip.so``, the bundled files in ``torch/lib`` are taken."""
    lib = os.path.join(torch_dir, "lib")
    starts = [os.path.join(lib, n) for n in TORCH_GPU_LIBS if os.path.isfile(os.path.join(lib, n))]
    found: dict[str, dict] = {}
    queue = [s for s in starts if _dynamic(s) is not None]
    seen = set()
    while queue:
        req = queue.pop(0)
        if req in seen:
            continue
        seen.add(req)
        needed = (_dynamic(req) or ([], [], []))[0]
        for name in needed:
            stem = name.split(".so", 1)[0]
            if stem not in RUNTIME_LIBS or stem in found:
                continue
            path, how = resolve_library(name, req, env, root)
            found[stem] = {"name": name, "path": path, "how": how, "needed_by": os.path.basename(req)}
            if path:
                queue.append(path)
    if not queue and not seen:  # no ELF to follow: what the wheel bundles
        for stem in RUNTIME_LIBS:
            hits = sorted(glob.glob(os.path.join(glob.escape(lib), stem + ".so*")))
            if hits:
                found[stem] = {"name": os.path.basename(hits[0]), "path": hits[0],
                               "how": "bundled in torch/lib (no libtorch_hip.so to follow)", "needed_by": None}
    return found


def rocblas_library_dirs(librocblas: str, env: Mapping[str, str]) -> list[str]:
    """Where rocBLAS reads its Tensile code objects: ``ROCBLAS_TENSILE_LIBPATH``,
    else ``rocblas/library`` (or ``rocblas/<version>/library``) beside librocblas."""
    if env.get("ROCBLAS_TENSILE_LIBPATH"):
        return [env["ROCBLAS_TENSILE_LIBPATH"]]
    d = os.path.dirname(os.path.realpath(librocblas))
    return [p for p in [os.path.join(d, "rocblas", "library")] + sorted(glob.glob(os.path.join(d, "rocblas", "*", "library")))
            if os.path.isdir(p)]


def miopen_db_dirs(libmiopen: str) -> list[str]:
    """MIOpen's system kernel DB directory: ``<lib dir>/../share/miopen/db``."""
    d = os.path.normpath(os.path.join(os.path.dirname(os.path.realpath(libmiopen)), "..", "share", "miopen", "db"))
    return [d] if os.path.isdir(d) else []


# ------------------------------------------------------------------ coverage

COVERAGE_STATES = ("patched", "partial", "safe", "refused", "error", "not yet seen")


def coverage(paths: Mapping[str, list[str]], cache_dir: str, mode: str = "override",
             on_object: Callable[[], None] | None = None) -> dict:
    """For each group of paths (e.g. "torch/lib fat binaries": [...]), the
    code objects for the mode's processor (gfx1030 under override) found
    there, counted by their cache state; distinct objects (by content key)
    are counted once per group."""
    from kpatch.delivery import cache
    from kpatch.delivery.warm import source_objects

    out: dict = {}
    for group, group_paths in paths.items():
        counts = {s: 0 for s in COVERAGE_STATES}
        errors = []
        objects = 0
        for item in source_objects(group_paths, mode):
            if item.error:
                errors.append({"item": str(item.uri), "reason": item.error})
                continue
            if item.data is None:
                continue
            objects += 1
            if on_object:
                on_object()
            rec = cache.read_record(cache_dir, item.key, mode)
            counts[rec.status if rec is not None else "not yet seen"] += 1
        out[group] = {"paths": list(group_paths), "objects": objects, "counts": counts, "errors": errors}
    return out


# ------------------------------------------------------------------ the diagnosis

@dataclass
class Options:
    """What the doctor looks at (the CLI's options; tests point it at fake trees)."""

    root: str = "/"
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    python: str | None = None
    cache_dir: str | None = None
    coverage: bool = True
    on_object: Callable[[], None] | None = None
    #: a probe already made (selftest's), used instead of probing again
    found: TorchProbe | None = None


def _q(path: str) -> str:
    return shlex.quote(path)


def diagnose(opts: Options) -> Diagnosis:
    """Run every check (see the module doc)."""
    from kpatch.delivery import cache as cachemod
    from kpatch.delivery import hooklib
    from kpatch.delivery.warm import cache_report

    d = Diagnosis()
    root, env = opts.root, opts.env
    d.facts["system"] = {"kernel": (_read(os.path.join(root, "proc", "sys", "kernel", "osrelease"), 256) or "").strip()
                         or None, "machine": platform.machine()}

    # --- GPU
    gpus = read_gpus(root)
    d.facts["gpus"] = [g.to_json() for g in gpus]
    navi10 = [g for g in gpus if g.node.gfx_target_version == GFX1010]
    if not gpus:
        d.add("problem", "GPU", "no AMD GPU in the KFD topology (/sys/class/kfd/kfd/topology/nodes): the amdgpu "
              "driver is not loaded, or this is not an AMD GPU machine", "sudo modprobe amdgpu && kpatch doctor")
    for g in gpus:
        v = g.node.gfx_target_version
        if v == GFX1010:
            d.add("ok", "GPU", _gpu_text(g) + ": RDNA1, what kpatch is for")
        elif v == GFX1030 or 100300 < v < 100400:
            d.add("ok", "GPU", _gpu_text(g) + ": RDNA2, runs ROCm's gfx1030 code natively; kpatch is not needed for it")
        else:
            d.add("warning", "GPU", _gpu_text(g) + ": kpatch patches gfx1030 code for gfx1010 GPUs only; "
                  "this GPU gets nothing from it")

    # --- driver and device access
    module = os.path.join(root, "sys", "module", "amdgpu")
    kernel = d.facts["system"]["kernel"] or "unknown"
    if os.path.isdir(module):
        ver = (_read(os.path.join(module, "version"), 256) or "").strip()
        d.facts["driver"] = {"amdgpu": True, "version": ver or None, "kernel": kernel}
        d.add("ok", "driver", f"amdgpu kernel driver loaded ({'version ' + ver if ver else 'in-tree'}; kernel {kernel})")
    else:
        d.facts["driver"] = {"amdgpu": False, "version": None, "kernel": kernel}
        d.add("problem", "driver", f"the amdgpu kernel driver is not loaded (kernel {kernel})", "sudo modprobe amdgpu")
    kfd = os.path.join(root, "dev", "kfd")
    if gpus:
        if not os.path.exists(kfd):
            d.add("problem", "/dev/kfd", "/dev/kfd does not exist: ROCm cannot reach the GPU", "sudo modprobe amdgpu")
        elif not os.access(kfd, os.R_OK | os.W_OK):
            d.add("problem", "/dev/kfd", "you cannot open /dev/kfd for reading and writing (ROCm needs it): add "
                  "yourself to the render and video groups, then log in again", 'sudo usermod -aG render,video "$USER"')
        else:
            d.add("ok", "/dev/kfd", "/dev/kfd is readable and writable by you")

    # --- the override
    override = env.get("HSA_OVERRIDE_GFX_VERSION", "").strip()
    d.facts["HSA_OVERRIDE_GFX_VERSION"] = override or None
    if navi10:
        if not override:
            d.add("ok", "override", "HSA_OVERRIDE_GFX_VERSION is not set; `kpatch run` sets it to 10.3.0 for the "
                  "program it runs (setting it yourself without kpatch runs unpatched gfx1030 code)")
        elif override == devmod.OVERRIDE_VALUE:
            d.add("warning", "override", "HSA_OVERRIDE_GFX_VERSION=10.3.0 is set in this shell: every ROCm program "
                  "started without `kpatch run` runs unpatched gfx1030 code on your gfx1010",
                  "unset HSA_OVERRIDE_GFX_VERSION  # and start programs with: kpatch run -- python train.py")
        else:
            d.add("warning", "override", f"HSA_OVERRIDE_GFX_VERSION={override}: not 10.3.0; `kpatch run` replaces it "
                  "with 10.3.0 for the program it runs")
    elif override:
        d.add("warning", "override", f"HSA_OVERRIDE_GFX_VERSION={override} is set but there is no gfx1010 GPU: "
              "the override makes ROCm present your GPU as another one", "unset HSA_OVERRIDE_GFX_VERSION")

    # --- PyTorch
    found, tried = (opts.found, [opts.found]) if opts.found else find_torch_python(opts.python, env)
    d.facts["python_tried"] = [{"python": t.python, "error": t.error} for t in tried]
    torch = found.torch if found else None
    d.facts["torch"] = dict(torch, python=found.python, python_version=found.info.get("python_version")) if torch else None
    runtime: dict[str, dict] = {}
    if torch is None:
        why = "; ".join(f"{t.python}: {t.error}" for t in tried) or "no Python found"
        d.add("problem", "PyTorch", f"no Python that imports torch ({why})",
              "pip install torch --index-url https://download.pytorch.org/whl/rocm6.2  "
              "# or: kpatch doctor --python /path/to/venv/bin/python")
    elif not torch.get("hip"):
        kind = f"CUDA {torch['cuda']}" if torch.get("cuda") else "CPU-only"
        d.add("problem", "PyTorch", f"torch {torch['version']} ({found.python}) is a {kind} build: it has no ROCm "
              "(HIP) support", f"{_q(found.python)} -m pip install --force-reinstall torch "
              "--index-url https://download.pytorch.org/whl/rocm6.2")
    else:
        d.add("ok", "PyTorch", f"torch {torch['version']}, HIP {torch['hip']} ({found.python}, {torch['dir']})")
        runtime = runtime_libraries(torch["dir"], env, root)
    d.facts["runtime"] = runtime

    # --- the ROCm runtime it loads
    if torch and torch.get("hip"):
        lib = os.path.join(torch["dir"], "lib")
        for stem, what in RUNTIME_LIBS.items():
            r = runtime.get(stem)
            if r is None:
                d.add("warning", what, f"{stem}: not found among the libraries PyTorch's GPU libraries need "
                      f"(no {' or '.join(TORCH_GPU_LIBS)} in {lib}, or they do not need it)")
            elif r["path"] is None:
                d.add("problem", what, f"{r['name']} (needed by {r['needed_by']}) is not found: PyTorch cannot load "
                      "its GPU libraries", f"{_q(found.python)} -c 'import torch; print(torch.cuda.is_available())'")
            else:
                real = os.path.realpath(r["path"])
                bundled = real.startswith(os.path.realpath(lib) + os.sep)
                where = "bundled with PyTorch" if bundled else "the system's, not PyTorch's own"
                text = f"{real} ({where}; found through {r['how']})"
                if r["how"] == "LD_LIBRARY_PATH" and not bundled:
                    d.add("warning", what, text + ": LD_LIBRARY_PATH makes PyTorch load another ROCm than it was "
                          "built with", "unset LD_LIBRARY_PATH  # or remove the ROCm directory from it")
                else:
                    d.add("ok", what, text)

    # --- MIOpen: cache directory and DB name
    roots = miopen_paths.DEFAULT_ROCM_ROOTS if root in ("/", "") else \
        tuple(os.path.join(root, r.lstrip("/")) for r in miopen_paths.DEFAULT_ROCM_ROOTS)
    mi = runtime.get("libMIOpen")
    if mi and mi.get("path"):
        roots = roots + (os.path.normpath(os.path.join(os.path.dirname(os.path.realpath(mi["path"])), "..")),)
    db_name = None
    if navi10:
        try:
            cu = devmod.detect_cu(None, env, [g.node for g in navi10])
            db_name = miopen_paths.user_db_name("gfx1030", int(cu.value))
        except UsageError as e:
            d.add("warning", "MIOpen DB", e.reason)
    try:
        cdir = miopen_paths.resolve_cache_dir(env, rocm_roots=roots)
        d.facts["miopen"] = {"cache_dir": cdir.path, "why": cdir.why, "user_db": db_name}
        text = f"user cache {cdir.path} ({cdir.why})"
        d.add("ok", "MIOpen cache", text + (f"; under the override it uses {db_name}" if db_name else ""))
    except UsageError as e:
        d.facts["miopen"] = {"cache_dir": None, "why": e.reason, "user_db": db_name}
        reason = re.sub(r",? or pass --out-dir DIR|; pass --out-dir DIR", "", e.reason)  # apply's advice, not ours
        d.add("warning", "MIOpen cache", f"user cache directory not known yet: {reason}"
              + (f"; it will use {db_name}" if db_name else ""),
              "kpatch selftest --quick  # MIOpen creates it on its first run")

    # --- kpatch: hook and cache
    try:
        hook = hooklib.hook_library_path()
        d.facts["hook"] = hook
        d.add("ok", "kpatch hook", f"load-time hook built: {hook}")
    except UsageError as e:
        d.facts["hook"] = None
        d.add("problem", "kpatch hook", e.reason, "sudo apt-get install -y gcc && pip install --force-reinstall .")
    cache_dir = os.path.abspath(opts.cache_dir or env.get("KPATCH_CACHE_DIR") or cachemod.cache_dir())
    report = cache_report(cache_dir)
    d.facts["cache"] = {k: report[k] for k in ("cache_dir", "bytes", "entries", "by_status")}
    d.facts["cache"]["refused_kernels"] = len(report["refusals"])
    if report["entries"] == 0:
        d.add("ok", "kpatch cache", f"{cache_dir}: empty (the first `kpatch run` patches as objects load)")
    else:
        by = ", ".join(f"{n} {k}" for k, n in report["by_status"].items())
        status = "warning" if report["refusals"] else "ok"
        d.add(status, "kpatch cache", f"{cache_dir}: {report['entries']} entries ({by}); "
              f"{len(report['refusals'])} refused kernel(s) or error(s)",
              "kpatch cache show" if report["refusals"] else None)

    # --- coverage
    if torch and torch.get("hip") and opts.coverage:
        groups: dict[str, list[str]] = {}
        lib = os.path.join(torch["dir"], "lib")
        fat = sorted(glob.glob(os.path.join(glob.escape(lib), "*.so*")))
        if fat:
            groups["torch/lib fat binaries"] = fat
        rb = runtime.get("librocblas")
        rdirs = rocblas_library_dirs(rb["path"], env) if rb and rb.get("path") else []
        if not rdirs and os.path.isdir(os.path.join(lib, "rocblas", "library")):
            rdirs = [os.path.join(lib, "rocblas", "library")]
        if rdirs:
            groups["rocBLAS library"] = rdirs
        mdirs = miopen_db_dirs(mi["path"]) if mi and mi.get("path") else []
        own = os.path.join(torch["dir"], "share", "miopen", "db")
        if os.path.isdir(own) and own not in mdirs:
            mdirs.append(own)
        if mdirs:
            groups["MIOpen kernel DBs"] = mdirs
        cov = coverage(groups, cache_dir, "override", opts.on_object)
        d.facts["coverage"] = cov
        for group, c in cov.items():
            n = c["counts"]
            text = (f"{c['objects']} gfx1030 code object(s): {n['patched']} patched, {n['partial']} partial, "
                    f"{n['safe']} already safe, {n['refused']} refused, {n['error']} error(s), "
                    f"{n['not yet seen']} not yet seen")
            for e in c["errors"][:3]:
                text += f"; unreadable: {e['item']}: {e['reason']}"
            if n["not yet seen"]:
                d.add("warning", f"coverage: {group}", text,
                      "kpatch warm " + " ".join(_q(p) for p in (c["paths"] if group != "torch/lib fat binaries" else [lib])))
            elif n["refused"] or n["error"] or n["partial"]:
                how = ("MIOpen solvers using them are turned off by `kpatch run`" if group.startswith("MIOpen")
                       else "`kpatch run --strict` makes them fail to load instead")
                d.add("warning", f"coverage: {group}", text + f" (refused kernels run unpatched; {how})",
                      "kpatch cache show")
            else:
                d.add("ok", f"coverage: {group}", text)
        d.add("ok", "coverage", "kernels MIOpen compiles at run time are not in the install: the hook patches them "
              "as they load (see `kpatch cache show` after a run)")

    # --- what patching cannot fix
    if navi10:
        d.add("warning", "known limits", "hangs that were fixed in the amdgpu kernel driver (e.g. queue preemption) "
              f"cannot be fixed by patching code; your kernel is {kernel}. If `kpatch selftest` reports a hung "
              "case, try a newer kernel before reporting it", "kpatch selftest --quick")
    if navi10 and torch and torch.get("hip") and d.problems == 0:
        d.add("ok", "next", "ready: run your program through kpatch", "kpatch run -- python train.py")
    return d
