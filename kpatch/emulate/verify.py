"""Differential check of a patch: the original and the patched kernel run on
the same synthesised inputs, every byte they write compared.

For each kernel, :func:`synthesise` builds arguments from the metadata:
each global buffer argument gets :data:`BUFFER_BYTES` of random data with
:data:`GUARD_BYTES` of random guard zone on each side (inside the same
allocation, so a stray write there is seen, not faulted; the data is made
a page at a time where the kernel touches it, :class:`LazyBytes`, so a
buffer can be as large as the tensors a kernel's compile-time sizes
address), integer
by-value arguments take values from a small grid, hidden arguments what
the runtime passes.  Arguments it cannot make up safely (images, samplers,
pipes, queues, dynamic LDS pointers, hidden arguments it does not know)
make the kernel "not verified".  Both code objects get the same buffers at
the same addresses and the same values in the registers the hardware
leaves undefined; run ``r`` uses seed ``seed + r`` and a grid of ``1 + r %
3`` workgroups.

A kernel is **equal** when every run of both finished, all buffers
(guard zones included) hold the same bytes, as do the changes each run made
to the code object's writable segments (device globals), and some run wrote
into an argument's buffer or a global; **different** when some run wrote different bytes or
only one side faulted or stopped; **not verified** otherwise (something
not emulated, arguments not synthesised, both sides faulting, no run of
either side writing a byte: masked-off stores prove nothing).  Only
"equal" passes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kpatch.emulate.dispatch import GLOBAL_PREFIX, Machine
from kpatch.emulate.errors import CannotEmulate, EmulationError
from kpatch.emulate.launch import hidden_value, kernarg_segment
from kpatch.emulate.memory import LazyBytes

#: Bytes of each synthesised buffer (random, made where touched) and of each
#: buffer a recipe fills (zeros after the recipe's bytes).
BUFFER_BYTES = 1 << 30
RECIPE_BYTES = 1 << 20
GUARD_BYTES = 4096
#: Values integer by-value arguments take: in run 0 all the first (sizes that
#: agree, so shape arithmetic such as H - 2 by W - 2 leaves work to do); in
#: run r argument i the (r + i)-th, cyclically.
INT_GRID = (8, 1, 5, 3, 16, 2)
#: Wave-instructions one run of one kernel may take (each side) before it is stopped.
RUN_LIMIT = 1_000_000
#: LDS a workgroup may have on GFX10; kernels get what their descriptor does not
#: allocate as dynamic LDS (the launcher would give dynamic shared memory).
LDS_BYTES = 65536
#: Workgroup size used when the metadata does not require one.
DEFAULT_BLOCK = 256

EQUAL, DIFFERENT, NOT_VERIFIED = "equal", "different", "not verified"
#: The kernel is the same in both objects (see :func:`untouched`): not a verification target.
UNTOUCHED = "untouched"
#: Instructions through which a kernel reaches code or data other than its own bytes by address.
_REACHING = ("s_getpc_b64", "s_setpc_b64", "s_swappc_b64", "s_call_b64", "s_rfe_b64")
#: Every difference is an f32 word within the allowed ulp distance (approximations, ``max_ulp``).
WITHIN = "within ulp"


@dataclass
class KernelVerdict:
    """The outcome for one kernel."""

    name: str
    status: str
    detail: str = ""
    runs: int = 0
    instructions: tuple[int, int] = (0, 0)
    seconds: float = 0.0
    max_ulp: float | None = None  # largest f32 distance among differing words (None: none differed)
    recipe: str = ""  # the argument recipe (kpatch.emulate.recipes) the inputs were built by
    written: tuple[int, int] = (0, 0)  # bytes stores wrote into argument buffers, all runs, each side

    def to_json(self) -> dict:
        return {"kernel": self.name, "status": self.status, "detail": self.detail, "runs": self.runs,
                "wave_instructions": {"original": self.instructions[0], "patched": self.instructions[1]},
                "bytes_written": {"original": self.written[0], "patched": self.written[1]},
                "seconds": round(self.seconds, 3), "max_ulp": self.max_ulp, "recipe": self.recipe or None}


class CannotSynthesise(Exception):
    """A kernel argument no safe value can be made up for."""


@dataclass
class Plan:
    """Arguments of one run: buffers (name, bytes, offset of the data) and the kernarg values."""

    buffers: list = field(default_factory=list)
    values: list = field(default_factory=list)  # per explicit arg: ("buf", index), int, bytes or
    #   ("struct", bytes, ((offset, buffer index), ...)): an aggregate holding buffers' addresses
    recipe: str = ""  # the argument recipe used, if any
    links: list = field(default_factory=list)  # (buffer, byte offset, buffer whose address is written there)
    grid: tuple = (1, 1, 1)
    block: tuple = (1, 1, 1)


def workgroup_size(md: dict) -> tuple[int, int, int]:
    req = md.get(".reqd_workgroup_size")
    if req:
        return tuple(int(x) for x in req) + (1,) * (3 - len(req))
    mx = int(md.get(".max_flat_workgroup_size", DEFAULT_BLOCK) or DEFAULT_BLOCK)
    return (min(mx, DEFAULT_BLOCK), 1, 1)


def synthesise(md: dict, run: int, seed: int, name: str | None = None) -> Plan:
    """Arguments for run ``run`` of the kernel described by metadata ``md``;
    the arguments a recipe (:mod:`kpatch.emulate.recipes`) decides for a
    kernel ``name`` come from it."""
    from kpatch.emulate import recipes
    rng = np.random.default_rng(seed + 7919 * run)
    found = None
    if name is not None:
        try:
            found = recipes.find(name, md)
        except recipes.RecipeDoesNotHold as e:
            raise CannotSynthesise(str(e)) from None
    block = workgroup_size(md)
    if found is not None and found[0].block is not None:  # the launch's workgroup size, as the recipe knows it
        block = found[0].block(name, md) or block
    gy = (found[0].groups_y(name) if found is not None and found[0].groups_y is not None else None) or 1
    gx = (found[0].groups_x(name) if found is not None and found[0].groups_x is not None else None) or 1 + run % 3
    plan = Plan(block=block, grid=(block[0] * gx, block[1] * gy, block[2]))
    chosen = {}
    if found is not None:
        plan.recipe = found[0].name
        ctx = recipes.Context(run, plan.grid[0] // block[0], block, rng, md)
        try:
            chosen = found[0].build(ctx, found[1], name)
        except recipes.RecipeDoesNotHold as e:
            raise CannotSynthesise(str(e)) from None
    explicit = -1
    for i, a in enumerate(md.get(".args", [])):
        kind = a.get(".value_kind", "")
        size = a.get(".size", 0)
        if kind.startswith("hidden_"):
            if hidden_value(kind, plan.grid, plan.block) is None:
                raise CannotSynthesise(f"hidden argument {kind}")
            continue
        explicit += 1
        if explicit in chosen:
            plan.values.append(_recipe_value(plan, i, chosen[explicit], rng))
        elif kind == "global_buffer" and a.get(".address_space", "global") in ("global", "generic", "constant"):
            data = LazyBytes(BUFFER_BYTES + 2 * GUARD_BYTES, int(rng.integers(1 << 62)))
            plan.values.append(("buf", len(plan.buffers)))
            plan.buffers.append((f"arg{i}", data))
        elif kind == "by_value" and size in (1, 2, 4, 8):
            plan.values.append(INT_GRID[0] if run == 0 else INT_GRID[(run + i) % len(INT_GRID)])
        elif kind == "by_value":
            plan.values.append(bytes(size))  # aggregates: all zero
        else:
            raise CannotSynthesise(f"argument {i} ({kind or 'no kind'})")
    return plan


def _recipe_buffer(plan: Plan, name: str, fill, rng) -> tuple:
    """A buffer of RECIPE_BYTES holding a recipe's bytes, in random guard zones
    (the buffers its pointers name made too, linked in ``plan.links``)."""
    if len(fill.head) > RECIPE_BYTES:
        raise CannotSynthesise(f"{name}: the recipe's {len(fill.head)} bytes exceed the {RECIPE_BYTES}-byte buffer")
    data = np.zeros(RECIPE_BYTES + 2 * GUARD_BYTES, np.uint8)
    data[:GUARD_BYTES] = rng.integers(0, 256, GUARD_BYTES, dtype=np.uint8)
    data[GUARD_BYTES + RECIPE_BYTES:] = rng.integers(0, 256, GUARD_BYTES, dtype=np.uint8)
    data[GUARD_BYTES:GUARD_BYTES + len(fill.head)] = np.frombuffer(fill.head, np.uint8)
    plan.buffers.append((name, data))
    index = len(plan.buffers) - 1
    for off, f in fill.pointers:
        plan.links.append((index, off, _recipe_buffer(plan, f"{name}>{off}", f, rng)[1]))
    return ("buf", index)


def _recipe_value(plan: Plan, i: int, v, rng):
    """A plan value (see :class:`Plan`) for explicit argument ``i`` from a recipe's value."""
    from kpatch.emulate.recipes import Fill, Struct
    if isinstance(v, Fill):
        return _recipe_buffer(plan, f"arg{i}", v, rng)
    if isinstance(v, Struct):
        ptrs = tuple((off, _recipe_buffer(plan, f"arg{i}+{off}", f, rng)[1]) for off, f in v.pointers)
        return ("struct", v.data.ljust(v.size, b"\0"), ptrs)
    return v


def writable_arguments(md: dict) -> list[str]:
    """Names (or indices) of the explicit arguments a kernel may write
    through: global buffers not marked const or read-only, and by-value
    aggregates (they may hold pointers, as recipes' structs do)."""
    out = []
    for i, a in enumerate(md.get(".args", [])):
        kind = a.get(".value_kind", "")
        ro = a.get(".is_const") or "read_only" in (a.get(".access"), a.get(".actual_access"))
        if (kind == "global_buffer" and not ro) or (kind == "by_value" and a.get(".size", 0) > 8):
            out.append(str(a.get(".name") or i))
    return out


def _execute(data: bytes, name: str, plan: Plan, seed: int, target: str | None, limit: int = RUN_LIMIT):
    """(memory image, wave-instructions, seconds, bytes written into the
    argument buffers) of one run, or the error that stopped it."""
    m = Machine(data, seed=seed, target=target)
    k = m.kernel(name)
    md = k.metadata or {}
    allocs = [m.memory.allocate_lazy(n, LazyBytes(d.size, d.seed, d.head)) if isinstance(d, LazyBytes)
              else m.memory.allocate(n, d) for n, d in plan.buffers]
    bases = [b.base + GUARD_BYTES for b in allocs]
    for bi, off, target in plan.links:
        allocs[bi].data[GUARD_BYTES + off:GUARD_BYTES + off + 8] = np.frombuffer(
            bases[target].to_bytes(8, "little"), np.uint8)
    values = []
    for v in plan.values:
        if isinstance(v, tuple) and v[0] == "buf":
            values.append(bases[v[1]])
        elif isinstance(v, tuple):  # ("struct", bytes, ((offset, buffer index), ...))
            agg = bytearray(v[1])
            for off, bi in v[2]:
                agg[off:off + 8] = bases[bi].to_bytes(8, "little")
            values.append(bytes(agg))
        else:
            values.append(v)
    dyn = max(0, LDS_BYTES - k.descriptor.group_segment_fixed_size)
    seg = kernarg_segment(md, values, plan.grid, plan.block, dyn)
    initial = {b.name: b.data.copy() for b in m.memory.buffers if b.name.startswith(GLOBAL_PREFIX)}
    try:
        r = m.dispatch(name, seg, plan.grid, plan.block, limit=limit, dynamic_lds=dyn)
    except EmulationError as e:
        return e, 0, 0.0, 0
    written = sum(b.written for b in m.memory.buffers if b.name.startswith(("arg", GLOBAL_PREFIX)))
    return _changes_of_globals(m.memory.image(), initial), r.instructions, r.seconds, written


def _changes_of_globals(image: list, initial: dict) -> list:
    """A memory image whose writable code-object segments (device globals,
    ``global@VADDR``) are reduced to what the run changed, as one entry
    ``globals changed``: the address (in the code object) and new value of
    each byte that differs from its loaded state.  What the two objects hold
    there before the run, and where their writable segments lie, may
    differ (the patcher moves ``.dynamic``) without the kernel being
    different; what a kernel changes is compared where it lies."""
    out, addrs, vals = [], [np.zeros(0, "<u8")], [np.zeros(0, np.uint8)]
    for n, d in image:
        if n in initial:
            final = np.frombuffer(d, np.uint8)
            at = np.nonzero(final != initial[n])[0]
            addrs.append(at.astype("<u8") + np.uint64(int(n[len(GLOBAL_PREFIX):], 16)))
            vals.append(final[at])
        else:
            out.append((n, d))
    a = np.concatenate(addrs)  # always present, so both images have the same entries
    order = np.argsort(a, kind="stable")
    out.append(("globals changed", a[order].tobytes() + np.concatenate(vals)[order].tobytes()))
    return out


def comparable(a: list, b: list) -> tuple[list, list]:
    """Two memory images as lists of ``(name, start, bytes, size)`` of the
    same shapes: ``bytes`` are the buffer's from byte ``start`` of its
    ``size``.  A plain buffer is one entry from 0; a :class:`LazyBytes`
    buffer is one entry per run of consecutive pages either side touched
    (pages neither side touched are its seed's, the same on both, and are
    not made)."""
    outa, outb = [], []
    for (na, da), (nb, db) in zip(a, b):
        if isinstance(da, LazyBytes) and isinstance(db, LazyBytes):
            pages = sorted(set(da.pages) | set(db.pages))
            runs: list[list[int]] = []
            for p in pages:
                if runs and runs[-1][-1] == p - 1:
                    runs[-1].append(p)
                else:
                    runs.append([p])
            for run in runs:
                start = run[0] * LazyBytes.PAGE
                outa.append((na, start, b"".join(da.page(p).tobytes() for p in run), da.size))
                outb.append((nb, start, b"".join(db.page(p).tobytes() for p in run), db.size))
            continue
        outa.append((na, 0, bytes(da), len(da)))
        outb.append((nb, 0, bytes(db), len(db)))
    return outa, outb


def _first_difference(a: list, b: list) -> str:
    for (na, start, da, size), (nb, _, db, _) in zip(a, b):
        if da != db:
            x = np.frombuffer(da, np.uint8)
            y = np.frombuffer(db, np.uint8)
            n = min(len(x), len(y))
            idx = np.nonzero(x[:n] != y[:n])[0]
            if len(idx) == 0:
                return f"{na}: sizes differ"
            i = int(idx[0])
            at = start + i
            where = f"byte {at - GUARD_BYTES:#x}" if na.startswith("arg") else f"byte {at:#x}"
            if na.startswith("arg") and not GUARD_BYTES <= at < size - GUARD_BYTES:
                where += " (guard zone)"
            return (f"{na}: {len(idx)} bytes differ, first at {where}: original {x[i]:#04x}, "
                    f"patched {y[i]:#04x}")
    return "different buffers"


def ulp_distance(a: list, b: list) -> tuple[float, int]:
    """(largest distance in f32 ulps, number of differing aligned 4-byte words)
    over two memory images (as :func:`comparable` gives them); inf when a differing word is NaN on one side only
    or a buffer's size differs."""
    worst, count = 0.0, 0
    for (_, _, da, _), (_, _, db, _) in zip(a, b):
        if da == db:
            continue
        if len(da) != len(db) or len(da) % 4:
            return float("inf"), count + 1
        x = np.frombuffer(da, np.int32).astype(np.int64)
        y = np.frombuffer(db, np.int32).astype(np.int64)
        d = x != y
        count += int(d.sum())
        fx, fy = x[d].astype(np.int32).view(np.float32), y[d].astype(np.int32).view(np.float32)
        if (np.isnan(fx) != np.isnan(fy)).any():
            return float("inf"), count
        ox = np.where(x[d] < 0, -(x[d] & 0x7FFFFFFF), x[d])  # sign-magnitude -> ordered
        oy = np.where(y[d] < 0, -(y[d] & 0x7FFFFFFF), y[d])
        both_nan = np.isnan(fx) & np.isnan(fy)
        dist = np.where(both_nan, 0, np.abs(ox - oy))
        worst = max(worst, float(dist.max()) if len(dist) else 0.0)
    return worst, count


def verify_kernel(orig: bytes, patched: bytes, name: str, *, runs: int = 3, seed: int = 0,
                  orig_target: str | None = None, patched_target: str | None = None,
                  limit: int = RUN_LIMIT, max_ulp: int | None = None) -> KernelVerdict:
    """Run kernel ``name`` of both code objects ``runs`` times and compare.
    ``max_ulp``: accept differences that are all f32 words within that many
    ulps (status "within ulp", for approximations); the largest distance
    seen is kept in ``max_ulp`` of the verdict either way."""
    v = KernelVerdict(name, NOT_VERIFIED)
    try:
        md = Machine(orig, target=orig_target).kernel(name).metadata
    except EmulationError as e:
        v.detail = e.reason
        return v
    if md is None:
        v.detail = "no metadata for the kernel: arguments cannot be synthesised"
        return v
    ins = [0, 0]
    for r in range(runs):
        try:
            plan = synthesise(md, r, seed, name)
        except CannotSynthesise as e:
            v.detail = f"arguments cannot be synthesised: {e}"
            return v
        v.recipe = plan.recipe
        a = _execute(orig, name, plan, seed + r, orig_target, limit)
        if isinstance(a[0], CannotEmulate):  # the patched side need not run
            v.detail = f"original: {a[0].reason}"
            return v
        b = _execute(patched, name, plan, seed + r, patched_target, limit)
        ins[0] += a[1]
        ins[1] += b[1]
        v.seconds += a[2] + b[2]
        v.runs = r + 1
        v.instructions = tuple(ins)
        v.written = (v.written[0] + a[3], v.written[1] + b[3])
        ea, eb = isinstance(a[0], Exception), isinstance(b[0], Exception)
        if isinstance(b[0], CannotEmulate):
            v.detail = f"patched: {b[0].reason}"
            return v
        if isinstance(a[0], CannotEmulate):
            v.detail = f"original: {a[0].reason}"
            return v
        if ea and eb:
            v.detail = f"run {r + 1}: both stopped: original: {a[0].reason}; patched: {b[0].reason}"
            return v
        if ea != eb:
            v.status = DIFFERENT
            which, e = ("original", a[0]) if ea else ("patched", b[0])
            v.detail = f"run {r + 1}: only the {which} stopped: {e.reason}"
            return v
        ia, ib = comparable(a[0], b[0])
        if ia != ib:
            ulps, words = ulp_distance(ia, ib)
            v.max_ulp = max(v.max_ulp or 0.0, ulps)
            if max_ulp is not None and ulps <= max_ulp:
                v.detail = f"{words} f32 words differ in run {r + 1}, by at most {ulps:g} ulp"
                continue
            v.status = DIFFERENT
            v.detail = (f"run {r + 1} (grid {plan.grid[0]}x{plan.block[0]}): {_first_difference(ia, ib)}"
                        f" (largest f32 difference {ulps:g} ulp)")
            return v
    if v.written == (0, 0):
        writable = writable_arguments(md)
        v.detail = (f"wrote nothing: no run of either side wrote a byte into an argument's buffer "
                    f"(writable: {', '.join(writable)})" if writable else
                    "the kernel has no writable argument: nothing it computes can be compared")
        return v
    v.status = EQUAL if v.max_ulp is None else WITHIN
    if v.status == WITHIN:
        v.detail = f"f32 results differ by at most {v.max_ulp:g} ulp (allowed {max_ulp})"
    return v


def untouched(mo: Machine, mp: Machine, name: str) -> str | None:
    """Why kernel ``name`` is the same in both loaded objects, or None when
    that is not shown: its code (its function extent) has the same bytes
    (and entry), its kernel descriptor the same bytes but for the entry
    offset, every instruction decodes to the same instruction for both
    sides' targets (the same bytes may mean another opcode on gfx1010: an
    approximation such as legacy-fma-as-mad keeps the bytes and changes the
    meaning), and the code reaches nothing else (no branch leaves the extent;
    no ``s_getpc``, ``s_setpc``, ``s_swappc``, ``s_call``: pc-relative data
    or other functions might differ).  What it does then depends only on
    those bytes and its arguments, wherever the code lies (both may move)."""
    from kpatch.emulate.dispatch import LOAD_BASE
    from kpatch.isa import decode_one
    ea, eb = mo.co.function_extent(name), mp.co.function_extent(name)
    ka, kb = mo.co.kernel(name), mp.co.kernel(name)
    if None in (ea, eb, ka, kb) or ea.end - ea.start != eb.end - eb.start:
        return None
    if ka.entry - ea.start != kb.entry - eb.start:
        return None
    try:
        code = mo.memory.read_scalar(LOAD_BASE + ea.start, ea.end - ea.start)
        if code != mp.memory.read_scalar(LOAD_BASE + eb.start, eb.end - eb.start):
            return None
        da = mo.memory.read_scalar(LOAD_BASE + ka.descriptor_vaddr, 64)
        db = mp.memory.read_scalar(LOAD_BASE + kb.descriptor_vaddr, 64)
        if da[:16] + da[24:] != db[:16] + db[24:]:  # all but kernel_code_entry_byte_offset (where it is)
            return None
        at = 0
        while at < len(code):
            inst = decode_one(code[at:at + 24], mo.target, ea.start + at)
            if mp.target != mo.target:  # the same bytes must mean the same instruction on both
                other = decode_one(code[at:at + 24], mp.target, ea.start + at)
                if inst.is_unknown or other.is_unknown or (inst.size, inst.text()) != (other.size, other.text()):
                    return None
            t = inst.branch_target
            if inst.mnemonic in _REACHING or (t is not None and not ea.start <= t < ea.end):
                return None
            if inst.mnemonic == "s_endpgm" and at + inst.size < len(code) and not any(code[at + inst.size:]):
                break  # the rest is padding
            at += inst.size
    except Exception:  # anything not decoded or read: not shown to be the same
        return None
    return (f"the same {ea.end - ea.start} bytes of position-independent code and the same descriptor "
            f"settings in both, "
            f"reaching nothing else: not a verification target")


def verify(orig: bytes, patched: bytes, *, kernel: str | None = None, runs: int = 3, seed: int = 0,
           orig_target: str | None = None, patched_target: str | None = None,
           limit: int = RUN_LIMIT, max_ulp: int | None = None, skip_untouched: bool = False) -> list[KernelVerdict]:
    """A verdict for each kernel of ``orig`` (or the one named); with
    ``skip_untouched``, a kernel :func:`untouched` shows to be the same in
    both is not run: its verdict is UNTOUCHED."""
    mo = Machine(orig, target=orig_target)
    mp = Machine(patched, target=patched_target)
    names = [k.name for k in mo.co.kernels]
    if kernel is not None:
        if kernel not in names:
            raise EmulationError(f"no kernel {kernel} in the original")
        names = [kernel]
    out = []
    for name in names:
        if mp.co.kernel(name) is None:
            out.append(KernelVerdict(name, DIFFERENT, "the patched code object has no such kernel"))
            continue
        same = untouched(mo, mp, name) if skip_untouched else None
        if same:
            out.append(KernelVerdict(name, UNTOUCHED, same))
            continue
        out.append(verify_kernel(orig, patched, name, runs=runs, seed=seed, orig_target=orig_target,
                                 patched_target=patched_target, limit=limit, max_ulp=max_ulp))
    return out
