"""Steering MIOpen around kernels kpatch refused.

When kpatch cannot make a kernel safe for gfx1010 it leaves the kernel's code
as it is (a ``refused`` or ``partial`` cache entry). MIOpen would still pick
the solver that builds that kernel and run it. MIOpen lets each solver be
turned off by an environment switch (``MIOPEN_DEBUG_AMD_WINOGRAD_RXS_F2X3=0``,
...); this module maps refused kernels to those switches through the table in
``kpatch/data/miopen_solvers.toml`` (read from MIOpen's sources; the file
names the commit).  MIOpen then picks another GPU solver; nothing falls back
to the CPU.

A refused kernel is matched by its symbol name (what a cache record holds)
and, when known, by MIOpen's kernel file name (a kernel DB key such as
``Conv_Winograd_v30_3_1_fp16_dot2_f2x3_stride1.s.o``). A name several solvers
build (``MIOpenCvBwdWrW`` comes from two OpenCL weight-gradient solvers) turns
off every one of them: an extra solver turned off costs speed, a refused
kernel left reachable may fault the GPU. A kernel no listed solver builds, or
whose solver MIOpen has no switch for (batch-norm, pooling, softmax, ...), is
reported as not steered, with the reason.
"""

from __future__ import annotations

import fnmatch
import functools
from dataclasses import dataclass
from importlib.resources import files
from typing import Iterable, Mapping

from kpatch.data import read_toml
from kpatch.errors import FormatError

#: Kernel outcomes (``kpatch.rewrite.outcome.KERNEL_STATUSES``) whose code runs
#: unpatched: the ones to steer around.
REFUSED_OUTCOME = "refused"


@dataclass(frozen=True)
class Solver:
    """One MIOpen solver: the kernels its solutions use and its off switches."""

    name: str
    source: str
    kernel_files: tuple[str, ...]
    kernel_names: tuple[str, ...]
    disable: tuple[str, ...]
    note: str = ""
    uses: tuple[str, ...] = ()

    def builds_file(self, kernel_file: str) -> bool:
        """True when *kernel_file* (``X.s``, or a kernel DB key ``X.s.o``) is one of its files."""
        name = kernel_file[:-2] if kernel_file.endswith(".o") else kernel_file
        return any(fnmatch.fnmatchcase(name, p) for p in self.kernel_files)

    def builds_kernel(self, symbol: str) -> bool:
        """True when *symbol* is one of the kernel symbols its solutions launch."""
        return any(fnmatch.fnmatchcase(symbol, p) for p in self.kernel_names)


@dataclass(frozen=True)
class SteeringTable:
    """The solver table of one MIOpen version."""

    repository: str
    commit: str
    version: str
    disable_value: str
    solvers: tuple[Solver, ...]

    def solvers_for(self, kernel: str | None = None, kernel_file: str | None = None) -> list[Solver]:
        """Solvers that build a kernel with this symbol and/or from this file
        (both must match when both are given)."""
        out = []
        for s in self.solvers:
            if kernel is not None and not s.builds_kernel(kernel):
                continue
            if kernel_file is not None and not s.builds_file(kernel_file):
                continue
            if kernel is None and kernel_file is None:
                continue
            out.append(s)
        return out

    @property
    def switch_names(self) -> set[str]:
        return {e for s in self.solvers for e in s.disable}


def _strings(doc: Mapping, key: str, where: str) -> tuple[str, ...]:
    v = doc.get(key, [])
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise FormatError(f"{key} must be a list of strings", where)
    return tuple(v)


def load_table(path: str | None = None) -> SteeringTable:
    """Read a steering table (default: the one shipped in kpatch/data)."""
    if path is None:
        return _default_table()
    return _load(path)


@functools.cache
def _default_table() -> SteeringTable:
    return _load(str(files("kpatch") / "data" / "miopen_solvers.toml"))


def _load(path: str) -> SteeringTable:
    doc = read_toml(path)
    src = doc.get("source", {})
    solvers = []
    for i, s in enumerate(doc.get("solver", [])):
        where = f"{path}: solver {i + 1}"
        if not isinstance(s.get("name"), str):
            raise FormatError("solver without a name", where)
        solvers.append(Solver(s["name"], str(s.get("source", "")), _strings(s, "kernel_files", where),
                              _strings(s, "kernel_names", where), _strings(s, "disable", where),
                              str(s.get("note", "")), _strings(s, "uses", where)))
    return SteeringTable(str(src.get("repository", "")), str(src.get("commit", "")), str(src.get("version", "")),
                         str(src.get("disable_value", "0")), tuple(solvers))


@dataclass(frozen=True)
class Refused:
    """A kernel kpatch refused: its symbol, why, and (when known) its MIOpen file."""

    kernel: str
    reasons: tuple[str, ...] = ()
    kernel_file: str | None = None


@dataclass(frozen=True)
class Switch:
    """One environment switch to set, and why."""

    name: str
    value: str
    solvers: tuple[str, ...]
    kernels: tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class Plan:
    """What to set: the switches, and the refused kernels no switch reaches."""

    switches: tuple[Switch, ...] = ()
    unsteered: tuple[tuple[str, str], ...] = ()   # (kernel, why not)

    def env(self) -> dict[str, str]:
        return {s.name: s.value for s in self.switches}


def _short(items: list[str], n: int = 2) -> str:
    head = ", ".join(items[:n])
    return head + (f" and {len(items) - n} more" if len(items) > n else "")


def plan(refused: Iterable[Refused], table: SteeringTable | None = None) -> Plan:
    """The switches that turn off every solver building a refused kernel."""
    table = table or load_table()
    by_switch: dict[str, dict] = {}
    unsteered: dict[str, str] = {}
    for r in refused:
        solvers = table.solvers_for(r.kernel or None, r.kernel_file)
        if not solvers and r.kernel and r.kernel_file:
            # a file name that says more than the symbol alone: trust the symbol
            solvers = table.solvers_for(r.kernel, None)
        if not solvers:
            unsteered.setdefault(r.kernel or r.kernel_file or "?",
                                 "no MIOpen solver in kpatch's table builds it (not an MIOpen kernel, "
                                 f"or newer than MIOpen {table.version})")
            continue
        bare = [s.name for s in solvers if not s.disable]
        if bare:
            unsteered.setdefault(r.kernel, f"MIOpen has no switch for {_short(bare)}; it may still run unpatched")
        why = r.reasons[0] if r.reasons else "refused"
        for s in solvers:
            for env in s.disable:
                d = by_switch.setdefault(env, {"solvers": [], "kernels": [], "why": why})
                if s.name not in d["solvers"]:
                    d["solvers"].append(s.name)
                if r.kernel not in d["kernels"]:
                    d["kernels"].append(r.kernel)
    switches = []
    for env in sorted(by_switch):
        d = by_switch[env]
        reason = (f"turns off {_short(d['solvers'])}: kpatch refused its kernel {_short(d['kernels'])}"
                  f" ({d['why']})")
        switches.append(Switch(env, table.disable_value, tuple(d["solvers"]), tuple(d["kernels"]), reason))
    return Plan(tuple(switches), tuple(sorted(unsteered.items())))


def refused_in_record(record: Mapping) -> list[Refused]:
    """The refused kernels of one cache record (its JSON line, see
    ``kpatch.delivery.cache``): kernels whose outcome is ``refused`` in a
    ``refused`` or ``partial`` entry, whose code runs as it was."""
    if record.get("status") not in ("refused", "partial"):
        return []
    out = []
    for k in record.get("kernels") or []:
        if isinstance(k, Mapping) and k.get("outcome") == REFUSED_OUTCOME and isinstance(k.get("name"), str):
            reasons = tuple(str(x) for x in (k.get("reasons") or []))
            out.append(Refused(k["name"], reasons, record.get("kernel_file")))
    return out


def apply_to_env(p: Plan, env: dict[str, str]) -> tuple[list[Switch], list[Switch]]:
    """Set *p*'s switches in *env*; a switch the user already set keeps the
    user's value. Returns (set, kept as the user had them)."""
    done, kept = [], []
    for s in p.switches:
        if s.name in env and env[s.name] != s.value:
            kept.append(s)
        else:
            env[s.name] = s.value
            done.append(s)
    return done, kept


__all__ = ["Solver", "SteeringTable", "Refused", "Switch", "Plan", "load_table", "plan", "refused_in_record",
           "apply_to_env"]
