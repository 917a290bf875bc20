"""Dispatch set-up and the run loop: a kernel of a code object run on a grid.

:class:`Machine` holds one global address space (:class:`Memory`) with the
code object's loadable segments mapped at :data:`LOAD_BASE` (read-only,
except the writable ones: device globals), its dynamic relocations applied
as the loader applies them, and runs kernels on it.  A dispatch follows the kernel descriptor (AMDGPUUsage,
"Initial Kernel Execution State"): the user SGPRs it enables (private
segment buffer, dispatch packet, queue, kernarg segment, dispatch id, flat
scratch init, private segment size) in that order, then the workgroup ids
and workgroup info it enables; VGPRs v0/v1/v2 hold the work-item ids;
EXEC has the wave's work-items; the f32 and f16/f64 denormal modes come from
COMPUTE_PGM_RSRC1 (a rounding mode other than round-to-nearest-even is not
modelled).  Registers the hardware leaves undefined hold reproducible
pseudo-random values (a seed), so code that reads them differs from code
that does not.

Workgroups run one after another; the waves of a workgroup run in turn,
each until it reaches ``s_barrier`` or ``s_endpgm``; a barrier releases when
every wave still running has reached it.  The hardware gives no order
between workgroups or between waves between barriers, so kernels whose
results depend on that order (races) give the results of this one order.
"""

from __future__ import annotations

import struct
import time

import numpy as np

from kpatch.codeobject import CodeObject
from kpatch.emulate.errors import CannotEmulate, EmulationError
from kpatch.emulate.memory import SCRATCH_RSRC_BASE, LocalMemory, Memory, PrivateMemory
from kpatch.emulate.program import BARRIER, END, Ctx, compile_instruction
from kpatch.emulate.wave import Wave
from kpatch.isa import decode_one

#: Where the code object's first loadable segment is mapped.
LOAD_BASE = 0x7F0000000000
PT_LOAD = 1
PF_W = 2
R_AMDGPU_ABS64, R_AMDGPU_RELATIVE64 = 3, 13
#: Name prefix of the buffers holding the code object's writable segments (its
#: device globals): kernels may write them, and a comparison looks at them.
GLOBAL_PREFIX = "global@"
#: Instructions one dispatch may execute (over all waves) before it is stopped.
DEFAULT_LIMIT = 20_000_000
#: Private memory added for kernels that use a dynamic stack.
DYNAMIC_STACK = 16384


class Program:
    """The code a machine runs: decoded and compiled on first use, per address."""

    def __init__(self, memory: Memory, target: str, lanes: int, code: dict[int, bytes]):
        self.memory = memory
        self.target = target
        self.ctx = Ctx(lanes)
        self.code = code  # segment vaddr -> bytes (executable segments)
        self.steps: dict[int, tuple] = {}

    def step(self, pc: int):
        s = self.steps.get(pc)
        if s is None:
            for base, data in self.code.items():
                if base <= pc < base + len(data):
                    inst = decode_one(data[pc - base:pc - base + 24], self.target, pc)
                    break
            else:
                raise EmulationError(f"jump to {pc:#x}, outside the code")
            try:
                fn = compile_instruction(inst, self.ctx)
            except CannotEmulate as e:  # name the address as the code object has it
                raise CannotEmulate(e.what, pc - LOAD_BASE, e.reason.split(" (", 1)[1][:-1]
                                    if " (" in e.reason else "") from None
            s = (fn, inst.size, inst)
            self.steps[pc] = s
        return s


class Result:
    """What one dispatch did: instructions executed (wave-instructions) and time."""

    def __init__(self):
        self.instructions = 0
        self.seconds = 0.0
        self.waves = 0


class Machine:
    """One address space with one code object loaded."""

    def __init__(self, data: bytes, *, name: str = "", seed: int = 0, target: str | None = None):
        """``target``: decode the code as this processor (default: the code object's own)."""
        self.co = CodeObject.from_bytes(bytes(data), name=name)
        if self.co.target is None:
            raise EmulationError("code object without a target")
        self.target = target or self.co.target_id.split(":")[0]
        if self.target not in ("gfx1010", "gfx1030"):
            raise CannotEmulate(f"code for {self.target}")
        self.memory = Memory()
        self.seed = seed
        self.code: dict[int, bytes] = {}
        #: why the loader could not prepare the image (a dynamic relocation it does not
        #: apply): every dispatch stops with it
        self.unloadable: str | None = None
        segs = [seg for seg in self.co.elf.segments if seg.type == PT_LOAD and seg.memsz]
        images = []
        for seg in segs:
            img = bytearray(seg.memsz)
            img[:seg.filesz] = self.co.data[seg.offset:seg.offset + seg.filesz]
            images.append(img)
        self._relocate(segs, images)
        for seg, img in zip(segs, images):
            writable = bool(seg.flags & PF_W)
            self.memory.allocate(f"{GLOBAL_PREFIX if writable else 'segment@'}{seg.vaddr:#x}", bytes(img),
                                 base=LOAD_BASE + seg.vaddr, readonly=not writable)
            if seg.flags & 1:  # PF_X
                self.code[LOAD_BASE + seg.vaddr] = bytes(img)
        self._programs: dict[int, Program] = {}

    def _relocate(self, segs: list, images: list) -> None:
        """Apply the dynamic relocations (``.rela.dyn``) as the loader (ROCr)
        does at load: R_AMDGPU_ABS64 writes the symbol's loaded address plus
        the addend, R_AMDGPU_RELATIVE64 the load base plus the addend, at
        ``r_offset`` (a virtual address) in the segment images.  Any other
        type makes the object unloadable here (:attr:`unloadable`)."""
        from kpatch.elf.reader import RELA, SHT_RELA
        elf = self.co.elf
        for rs in elf.sections:
            if rs.type != SHT_RELA or not rs.flags & 2:  # SHF_ALLOC: dynamic relocations
                continue
            syms = elf.symbols(elf.sections[rs.link]) if rs.link else ()
            data = bytes(elf.section_bytes(rs))
            for rec in RELA.read_many(data, 0, len(data) // RELA.size):
                rtype, sym = rec.r_info & 0xFFFFFFFF, rec.r_info >> 32
                if rtype == R_AMDGPU_ABS64 and sym < len(syms):
                    value = LOAD_BASE + syms[sym].value + rec.r_addend
                elif rtype == R_AMDGPU_RELATIVE64:
                    value = LOAD_BASE + rec.r_addend
                else:
                    self.unloadable = f"dynamic relocation type {rtype} at {rec.r_offset:#x} ({rs.name})"
                    return
                for seg, img in zip(segs, images):
                    if seg.vaddr <= rec.r_offset and rec.r_offset + 8 <= seg.vaddr + seg.memsz:
                        at = rec.r_offset - seg.vaddr
                        img[at:at + 8] = (value & (1 << 64) - 1).to_bytes(8, "little")
                        break
                else:
                    self.unloadable = f"dynamic relocation at {rec.r_offset:#x} outside every segment"
                    return

    def kernel(self, name: str):
        k = self.co.kernel(name)
        if k is None:
            raise EmulationError(f"no kernel {name}")
        return k

    def program(self, lanes: int) -> Program:
        p = self._programs.get(lanes)
        if p is None:
            p = self._programs[lanes] = Program(self.memory, self.target, lanes, self.code)
        return p

    # -- one dispatch -------------------------------------------------------------
    def dispatch(self, name: str, kernarg: bytes, grid: tuple, block: tuple, *, dynamic_lds: int = 0,
                 limit: int = DEFAULT_LIMIT) -> Result:
        """Run kernel ``name`` on ``grid`` work-items (x, y, z) in workgroups of
        ``block``; ``kernarg`` is the kernarg segment (hidden arguments included)."""
        k = self.kernel(name)
        if self.unloadable:
            raise CannotEmulate(f"kernel {name}", None, self.unloadable)
        kd = k.descriptor
        if k.code_offset is None and self.co.e_type != 1:
            raise EmulationError(f"{name}: {k.entry_problem or 'no code'}")
        g = lambda f: kd.get(f)
        if g("FLOAT_ROUND_MODE_32") or g("FLOAT_ROUND_MODE_16_64"):
            raise CannotEmulate(f"kernel {name}", None, "rounding mode other than round-to-nearest-even")
        lanes = kd.wavefront_size
        grid = tuple(grid) + (1,) * (3 - len(grid))
        block = tuple(block) + (1,) * (3 - len(block))
        if any(b <= 0 for b in block) or any(x <= 0 for x in grid):
            raise EmulationError("empty grid or workgroup")
        ngroups = [(grid[i] + block[i] - 1) // block[i] for i in range(3)]
        res = Result()
        t0 = time.perf_counter()
        mem = self.memory
        karg = mem.allocate(f"kernarg:{name}", kernarg + bytes(max(0, kd.kernarg_size - len(kernarg))) + bytes(64))
        pkt = bytearray(64)
        struct.pack_into("<HHHHHHIIIIIQQ", pkt, 0, 0, 3, block[0], block[1], block[2], 0, grid[0], grid[1], grid[2],
                         kd.private_segment_fixed_size, kd.group_segment_fixed_size + dynamic_lds,
                         LOAD_BASE + k.descriptor_vaddr, karg.base)
        dpkt = mem.allocate(f"dispatch:{name}", bytes(pkt), readonly=True)
        queue = mem.allocate(f"queue:{name}", bytes(256), readonly=True)
        program = self.program(lanes)
        step = program.step
        lds_size = kd.group_segment_fixed_size + dynamic_lds
        priv = kd.private_segment_fixed_size + (DYNAMIC_STACK if g("USES_DYNAMIC_STACK") else 0)
        rng = np.random.default_rng(self.seed)
        user = self._user_sgprs(kd, karg.base, dpkt.base, queue.base, priv, name)
        entry = LOAD_BASE + k.entry
        wg_threads = block[0] * block[1] * block[2]
        nwaves = (wg_threads + lanes - 1) // lanes
        with np.errstate(all="ignore"):
            for gz in range(ngroups[2]):
                for gy in range(ngroups[1]):
                    for gx in range(ngroups[0]):
                        lds = LocalMemory(lds_size)
                        waves = []
                        # the work-items this workgroup has (partial at the grid's edges)
                        bx = min(block[0], grid[0] - gx * block[0])
                        by = min(block[1], grid[1] - gy * block[1])
                        bz = min(block[2], grid[2] - gz * block[2])
                        tid = np.arange(nwaves * lanes)
                        tx, ty, tz = tid % block[0], (tid // block[0]) % block[1], tid // (block[0] * block[1])
                        present = (tx < bx) & (ty < by) & (tz < bz) & (tid < wg_threads)
                        for wi in range(nwaves):
                            w = Wave(lanes, rng=rng)
                            w.id = wi
                            sl = slice(wi * lanes, (wi + 1) * lanes)
                            ex = present[sl]
                            if not ex.any():
                                continue
                            w.exec_value = int.from_bytes(np.packbits(ex, bitorder="little").tobytes(), "little")
                            self._system_sgprs(w, kd, user, (gx, gy, gz), wi == nwaves - 1, wg_threads, name)
                            nid = g("ENABLE_VGPR_WORKITEM_ID")
                            w.v[0] = tx[sl].astype(np.uint32)
                            if nid >= 1:
                                w.v[1] = ty[sl].astype(np.uint32)
                            if nid >= 2:
                                w.v[2] = tz[sl].astype(np.uint32)
                            w.mode_denorm32 = g("FLOAT_DENORM_MODE_32")
                            w.mode_denorm16 = g("FLOAT_DENORM_MODE_16_64")
                            w.memory = mem
                            w.lds = lds
                            w.private = PrivateMemory(lanes, priv)
                            w.pc = entry
                            waves.append(w)
                        res.waves += len(waves)
                        self._run_group(waves, step, limit - res.instructions, name)
                        res.instructions += sum(w.count for w in waves)
        res.seconds = time.perf_counter() - t0
        return res

    def _user_sgprs(self, kd, kernarg: int, dispatch: int, queue: int, priv: int, name: str) -> list[int]:
        g = kd.get
        out: list[int] = []
        if g("ENABLE_SGPR_PRIVATE_SEGMENT_BUFFER"):
            # a sentinel resource: MUBUF through it reaches the lane's private memory
            out += [SCRATCH_RSRC_BASE & 0xFFFFFFFF, SCRATCH_RSRC_BASE >> 32, 0xFFFFFFFF, 0x31014000]
        if g("ENABLE_SGPR_DISPATCH_PTR"):
            out += [dispatch & 0xFFFFFFFF, dispatch >> 32]
        if g("ENABLE_SGPR_QUEUE_PTR"):
            out += [queue & 0xFFFFFFFF, queue >> 32]
        if g("ENABLE_SGPR_KERNARG_SEGMENT_PTR"):
            out += [kernarg & 0xFFFFFFFF, kernarg >> 32]
        if g("ENABLE_SGPR_DISPATCH_ID"):
            out += [0, 0]
        if g("ENABLE_SGPR_FLAT_SCRATCH_INIT"):
            out += [0, 0]
        if g("ENABLE_SGPR_PRIVATE_SEGMENT_SIZE"):
            out += [priv]
        if len(out) > g("USER_SGPR_COUNT"):
            raise CannotEmulate(f"kernel {name}", None,
                                f"USER_SGPR_COUNT {g('USER_SGPR_COUNT')} but {len(out)} user SGPRs enabled")
        return out

    def _system_sgprs(self, w: Wave, kd, user: list[int], gid, last: bool, wg_threads: int, name: str):
        g = kd.get
        n = g("USER_SGPR_COUNT")
        for i, v in enumerate(user):
            w.s[i] = v
        for i, on in enumerate((g("ENABLE_SGPR_WORKGROUP_ID_X"), g("ENABLE_SGPR_WORKGROUP_ID_Y"),
                                g("ENABLE_SGPR_WORKGROUP_ID_Z"))):
            if on:
                w.s[n] = gid[i]
                n += 1
        if g("ENABLE_SGPR_WORKGROUP_INFO"):
            raise CannotEmulate(f"kernel {name}", None, "workgroup info SGPR")
        if g("ENABLE_PRIVATE_SEGMENT"):
            w.s[n] = 0  # private segment wave offset: each wave has its own private memory here
            n += 1

    def _run_group(self, waves: list[Wave], step, limit: int, name: str) -> None:
        live = [w for w in waves if not w.done]
        while live:
            for w in live:
                if w.at_barrier:
                    continue
                self._run_wave(w, step, limit)
            live = [w for w in waves if not w.done]
            if live and all(w.at_barrier for w in live):
                for w in live:
                    w.at_barrier = False
            elif live and not any(w.at_barrier for w in live):
                raise EmulationError("a wave stopped without reaching a barrier or s_endpgm")

    @staticmethod
    def _run_wave(w: Wave, step, limit: int) -> None:
        pc = w.pc
        count = w.count
        try:
            while True:
                fn, size, inst = step(pc)
                r = fn(w)
                count += 1
                if r is None:
                    pc += size
                elif r == END:
                    w.done = True
                    break
                elif r == BARRIER:
                    pc += size
                    w.at_barrier = True
                    break
                else:
                    pc = r
                if count > limit:
                    raise EmulationError(f"more than {limit} instructions (a loop that never ends?)")
        except CannotEmulate:
            raise
        except EmulationError as e:
            e.reason += f" (at {pc - LOAD_BASE:#x}: {step(pc)[2].text()})"
            e.args = (e.reason,)
            raise
        finally:
            w.pc = pc
            w.count = count
