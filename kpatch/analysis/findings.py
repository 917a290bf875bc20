"""Finding classes (what `kpatch explain` prints) and findings.

Every class has a stable code, its exact name, a one-line title, and four
texts: what it means, why it breaks gfx1010, how it is fixed (and by which
rule set of `kpatch patch`), and what kpatch cannot verify without a GPU.
A :class:`Finding` is one occurrence: the class, the address where the fix
goes (usually the second instruction of a hazard), a one-line detail, the
mitigation, and any other addresses involved (e.g. the hazard's source).

Rule set names (implemented by the rewriter): ``gfx1010-hazards`` (insert
wait states / waits, replace or relax instructions), ``gfx1010-isa``
(rewrite instructions gfx1010 lacks or reads differently), ``cu-mode``
(switch a kernel to CU mode), ``vsharp-llc-noalloc`` (clear LLC_NOALLOC in
buffer descriptor constants), ``retarget-gfx1010`` (relabel the target).
"""

from __future__ import annotations

from dataclasses import dataclass

RULE_SETS = ("gfx1010-hazards", "gfx1010-isa", "cu-mode", "vsharp-llc-noalloc", "retarget-gfx1010")


@dataclass(frozen=True)
class FindingClass:
    """One kind of problem kpatch reports."""

    code: str
    name: str
    title: str
    what: str
    why: str
    fix: str
    limits: str
    rule_set: str | None  # the rule set that fixes it; None: kpatch cannot fix it
    mitigation: str  # short default mitigation text
    seen_in: str = ""  # where it stops kernels of the real ROCm stack (measured), if it does
    partly_fixed_by: str | None = None  # rule_set None, but some occurrences have an exact fix: which

    @property
    def fixed_by(self) -> str:
        """Which rule set fixes this class, in a word or two (scan's table)."""
        return self.rule_set or (f"{self.partly_fixed_by}, some" if self.partly_fixed_by else "-")


    def explain(self) -> str:
        """The full text `kpatch explain NAME` prints."""
        fixed_by = (f"rule set {self.rule_set}" if self.rule_set else
                    f"rule set {self.partly_fixed_by}, for some" if self.partly_fixed_by else
                    "nothing: kpatch cannot fix it")
        return (f"{self.code} {self.name}: {self.title}\n\n"
                f"What it is:\n  {self.what}\n\n"
                f"Why it breaks gfx1010:\n  {self.why}\n\n"
                f"How it is fixed ({fixed_by}):\n  {self.fix}\n\n"
                f"What kpatch cannot verify without the GPU:\n  {self.limits}\n"
                + (f"\nWhere it appears in the real ROCm stack:\n  {self.seen_in}\n" if self.seen_in else ""))


_C = FindingClass
CLASSES: tuple[FindingClass, ...] = (
    _C("I001", "UnsupportedInstruction", "instruction gfx1010 does not have",
       "An instruction (or operand mode) that exists on gfx1030 but not on gfx1010: the dot products "
       "(v_dot2/v_dot4/v_dot8, v_dot2c/v_dot4c), global/buffer_atomic_csub, the addtid loads/stores, "
       "image_msaa_load, BVH ray intersection, scratch \"ST\" mode (no address register at all), the "
       "SHADER_CYCLES hardware register (hwreg 29), or a word that is not a valid instruction.",
       "gfx1010 decodes these bytes as an illegal instruction (the wave is killed) or as something else "
       "entirely; the kernel cannot run as it is.",
       "Only by an exact replacement sequence. The integer dot products have one: rule KI006 "
       "(int-dot-expand, rule set gfx1010-isa) computes v_dot4c_i32_i8, v_dot4_i32_i8, v_dot4_u32_u8, "
       "v_dot2_i32_i16 and v_dot2_u32_u16 with SDWA 24-bit multiplies and adds, exactly (integer "
       "arithmetic, no rounding), when the form is plain (no clamp or modifiers, VGPR multiplicands) and "
       "a spare VGPR can be had. kpatch has none for the rest (the f16 dots round differently when "
       "expanded: only the approximation dot2-fma-mix, by choice; the 4-bit dots need nibble extracts "
       "kpatch does not emit; csub has no gfx1010 atomic; ST mode and the extra image forms need registers "
       "kpatch does not allocate), so a kernel with one is unpatchable: use a gfx1010 build.",
       "Nothing to verify: the instruction is absent from gfx1010's instruction set (llvm-mc-16 "
       "rejects it for gfx1010).",
       None, "no exact gfx1010 replacement: rebuild for gfx1010",
       "The dot products are the only kind measured on real code (tools/realstack_report.py). MIOpen: "
       "v_dot2_f32_f16 in the fp16 gfx10 Winograd assembly (Conv_Winograd_v30_3_1_fp16_dot2_*.s: solvers "
       "ConvBinWinogradRxSf2x3, ConvBinWinogradRxSf2x3g1 and ConvBinWinogradRxSf3x2 for half-precision "
       "convolutions; MIOpen then falls back to its next solver, or use --allow-approx dot2-fma-mix); no "
       "fp32 MIOpen kernel. rocBLAS 4.4.1: v_dot2 in the HH_HPA Tensile libraries (half-precision GEMM "
       "with fp32 accumulation, torch.float16 matmul), refused; v_dot4c_i32_i8 in the I8I_HPA libraries "
       "(int8 GEMM), expanded by KI006; the fp32 (SS) and plain half (HH) libraries patch completely.",
       "gfx1010-isa"),
    _C("I002", "OpcodeReuse", "bytes that mean something else on gfx1010",
       "An encoding valid on both targets with a different meaning: VOP2 0x06 / VOP3 0x106 are "
       "v_fmac_legacy_f32 on gfx1030 but v_mac_legacy_f32 on gfx1010, VOP3 0x140 is v_fma_legacy_f32 "
       "on gfx1030 but v_mad_legacy_f32 on gfx1010.",
       "The kernel runs but computes something else: gfx1010 executes the unfused multiply-add "
       "(two roundings) where the compiler asked for a fused one (one rounding).",
       "The gfx1010-isa rule set re-encodes a reused instruction when gfx1010 has an instruction with "
       "exactly the gfx1030 meaning. For the known cases it has none (no gfx1010 instruction computes "
       "the legacy (0 * anything = 0) fused multiply-add), so those findings refuse the kernel unless "
       "the user opts in to the approximation legacy-fma-as-mad (`--allow-approx`), which leaves the "
       "bytes to run unfused.",
       "Whether the difference matters for a given kernel's results.",
       "gfx1010-isa", "re-encode with the same meaning, or rebuild for gfx1010"),
    _C("H001", "InstFwdPrefetchBug", "s_inst_prefetch executes",
       "s_inst_prefetch (SOPP 0x20), which gfx1030 code emits around loops to steer instruction "
       "prefetch.",
       "gfx101x has a hardware bug in instruction forward prefetch: executing s_inst_prefetch can "
       "make the shader fetch wrong instructions. LLVM never emits it for gfx1010.",
       "Replace it with s_nop 0 (same size, so nothing moves).",
       "Nothing: the replacement only drops a performance hint.",
       "gfx1010-isa", "replace with s_nop 0"),
    _C("H002", "VMEMtoScalarWriteHazard", "SALU/SMEM overwrites an SGPR a pending VMEM still reads",
       "A VMEM, DS or FLAT instruction reads an SGPR (resource descriptor, soffset, saddr, or EXEC), "
       "and a later SALU or SMEM instruction writes that SGPR before any VALU, `s_waitcnt 0` or "
       "`s_waitcnt_depctr` with vm_vsrc=0 has executed. Every path counts, across branches and loop "
       "back edges.",
       "On gfx101x the memory instruction may read its SGPR operands late, after the scalar write: it "
       "then uses the new value (wrong address, wrong descriptor, wrong EXEC mask).",
       "Insert `s_waitcnt_depctr 0xffe3` (vm_vsrc=0) before the scalar write.",
       "Whether the race is actually lost on a given GPU; kpatch fixes every instance on every path.",
       "gfx1010-hazards", "insert s_waitcnt_depctr 0xffe3 before it"),
    _C("H003", "SMEMtoVectorWriteHazard", "VALU overwrites an SGPR a pending SMEM still reads",
       "An SMEM instruction reads an SGPR (base, offset or store data), and a later VALU writes that "
       "SGPR (sdst, carry-out, VCC/EXEC of a compare, v_readlane/v_readfirstlane destination) before "
       "a non-SOPP SALU, an `s_waitcnt` with lgkmcnt(0) or `s_waitcnt_lgkmcnt null, 0` has executed.",
       "On gfx101x the SMEM may read its SGPR operands after the VALU wrote them.",
       "Insert `s_mov_b32 null, 0` (a harmless SALU) before the VALU.",
       "Whether the race is actually lost on a given GPU.",
       "gfx1010-hazards", "insert s_mov_b32 null, 0 before it"),
    _C("H004", "VcmpxPermlaneHazard", "v_permlane after a v_cmpx with no VALU between",
       "v_permlane16_b32 / v_permlanex16_b32 executes after a VALU compare that writes EXEC (v_cmpx_*, "
       "or v_cmp_* with an EXEC destination) with no other VALU (v_nop does not count) in between.",
       "On gfx101x the permlane may see the EXEC mask from before the compare.",
       "Insert `v_mov_b32 vN, vN` (vN = the permlane's src0) before the permlane; v_nop would be "
       "dropped by the hardware.",
       "Nothing beyond the rule itself.",
       "gfx1010-hazards", "insert v_mov_b32 vN, vN (N = src0) before it"),
    _C("H005", "VcmpxExecWARHazard", "VALU writes EXEC after a non-VALU read it",
       "A non-VALU instruction reads EXEC (s_and_saveexec, s_cbranch_execz, s_mov from exec, and every "
       "VMEM/DS/FLAT instruction implicitly), then a VALU writes EXEC (v_cmpx_*) before a VALU that "
       "writes an SGPR or an `s_waitcnt_depctr` with sa_sdst=0 has executed.",
       "On gfx101x the earlier instruction may read EXEC after the VALU changed it (write-after-read).",
       "Insert `s_waitcnt_depctr 0xfffe` (sa_sdst=0) before the VALU.",
       "Whether the race is actually lost on a given GPU.",
       "gfx1010-hazards", "insert s_waitcnt_depctr 0xfffe before it"),
    _C("H006", "LdsBranchVmemWARHazard", "LDS and VMEM on two sides of a branch",
       "A DS instruction, then a branch, then a VMEM (MUBUF/MTBUF/MIMG, global_*, scratch_*) "
       "instruction, or VMEM, branch, DS, with no instruction of the second kind and no "
       "`s_waitcnt_vscnt null, 0` between the first instruction and the second; only in functions "
       "that contain both kinds. Paths through loop back edges count.",
       "gfx101x can reorder the LDS and VMEM accesses around the branch (write-after-read between "
       "the two memory pipelines).",
       "Insert `s_waitcnt_vscnt null, 0x0` before the second instruction.",
       "Whether the accesses actually alias; kpatch fixes every instance.",
       "gfx1010-hazards", "insert s_waitcnt_vscnt null, 0x0 before it"),
    _C("H007", "NSAtoVMEMBug", "MUBUF/MTBUF right after a long NSA image instruction",
       "A MUBUF/MTBUF whose offset has bit 1 or 2 set ((offset & 6) != 0) executes immediately after "
       "(within one wait state of) an NSA MIMG instruction of 16 bytes or more.",
       "A gfx101x bug corrupts the buffer access.",
       "Insert `s_nop 0` between them.",
       "Nothing beyond the rule itself.",
       "gfx1010-hazards", "insert s_nop 0 before it"),
    _C("H008", "NSAClauseBug", "NSA image instruction inside an s_clause",
       "An `s_clause` hard clause that contains an NSA-encoded MIMG instruction.",
       "gfx101x mis-executes NSA image instructions in hard clauses.",
       "Replace the s_clause (its address is the finding's first address) with s_nop 0: same size, "
       "and a hard clause is only a scheduling hint; or shorten it so the NSA instruction is outside.",
       "Nothing beyond the rule itself.",
       "gfx1010-hazards", "replace the s_clause with s_nop 0"),
    _C("H009", "NSAMaxSize", "NSA image instruction with more than 5 addresses",
       "A MIMG instruction in NSA form with 6 or more address registers (two or more NSA dwords).",
       "gfx1010 supports at most 5 NSA address registers; longer forms are not valid on it.",
       "Copy the addresses with v_mov_b32 into contiguous VGPRs no instruction of the kernel names "
       "(growing the allocation if the workgroup still fits) and use the non-NSA form (rule KI005).",
       "Nothing beyond the rule itself; the kernel is refused when no such VGPRs can be had.",
       "gfx1010-isa", "rewrite as non-NSA MIMG with a contiguous address tuple"),
    _C("H010", "Offset3fBug", "branch whose offset is 0x3f",
       "A SOPP branch (s_branch, s_cbranch_*) with simm16 = 0x3f.",
       "gfx101x mis-executes branches with exactly this offset.",
       "Branch to the same target with simm16 0x40 and put `s_nop 0` right after the branch (LLVM's "
       "relaxation); moving code can create new 0x3f offsets, so relocation runs to a fixpoint.",
       "Nothing beyond the rule itself.",
       "gfx1010-hazards", "relax to simm16 0x40 + s_nop 0"),
    _C("H011", "FlatSegmentOffsetBug", "FLAT instruction with an immediate offset",
       "A FLAT-segment instruction (flat_*, not global_/scratch_) with a nonzero immediate offset.",
       "gfx101x ignores the immediate offset when a flat instruction accesses global memory: it "
       "accesses the wrong address.",
       "Fold the offset into the 64-bit address: `v_mad_u64_u32 v[t:t+1], null, offset, 1, v[a:a+1]` "
       "into a VGPR pair no instruction of the kernel names, then the access on v[t:t+1] with offset "
       "0 (rule KI003).",
       "Nothing beyond the rule itself: the folded address is the same whether it points at global, "
       "LDS or scratch memory; the kernel is refused when no such VGPR pair can be had.",
       "gfx1010-isa", "fold the offset into the address"),
    _C("H012", "NegativeUnalignedScratchOffsetBug", "scratch access with a negative unaligned offset",
       "A scratch_* instruction with a VGPR address and a negative immediate offset that is not a "
       "multiple of 4.",
       "gfx101x reads or writes the wrong scratch location.",
       "Fold the offset into the address: `v_add_nc_u32 vT, offset, vA` into a VGPR no instruction "
       "of the kernel names, then the access on vT with offset 0 (rule KI004).",
       "Nothing beyond the rule itself.",
       "gfx1010-isa", "fold the offset into the address"),
    _C("M001", "LdsMisalignedBug", "WGP-mode kernel with multi-dword LDS/FLAT accesses",
       "A kernel that runs in WGP mode (COMPUTE_PGM_RSRC1.WGP_MODE) and uses multi-dword LDS "
       "accesses (ds_read/write b64/b96/b128, read2/write2 b64) or multi-dword FLAT accesses, "
       "compiled for a target without this bug, so nothing guarantees their alignment.",
       "gfx101x in WGP mode returns wrong data for multi-dword LDS accesses that are not naturally "
       "aligned; LLVM avoids them for gfx1010, the gfx1030 compiler does not.",
       "Run the kernel in CU mode: clear RSRC1.WGP_MODE in the kernel descriptor (and "
       "`.workgroup_processor_mode` in the metadata). CU mode has no such bug; LDS per workgroup is "
       "limited to 64 KiB, which gfx10 kernels never exceed.",
       "Whether the accesses are actually misaligned at run time, and the performance cost of CU mode.",
       "cu-mode", "switch the kernel to CU mode"),
    _C("M002", "VsharpLlcNoalloc", "buffer descriptor built with LLC_NOALLOC bits",
       "A MUBUF/MTBUF instruction whose buffer descriptor (V#) word 3 was set from a constant that has "
       "the LLC_NOALLOC bits (26-27, a gfx10.3 MALL control) set, traced from the instruction that "
       "writes the descriptor register.",
       "Those bits are reserved on gfx10.1: the buffer may be read with the wrong cache or resource "
       "behaviour.",
       "Clear bits 26-27 in the constant that builds word 3.",
       "Descriptors loaded from memory (kernel arguments) are not visible to kpatch.",
       "vsharp-llc-noalloc", "clear LLC_NOALLOC (bits 26-27) in the constant"),
    _C("M003", "Xnack", "target settings gfx1010 cannot honour",
       "The code object's XNACK setting does not fit a gfx1010 device: it requires XNACK (xnack+), "
       "which gfx1010 GPUs run without by default, or it was built for a target without XNACK "
       "support and its code is not XNACK-replay safe (an SMEM soft clause writes a register it "
       "or another instruction of the clause reads), so it must not run with XNACK on.",
       "With XNACK on, a faulting memory instruction is replayed and re-reads overwritten registers; "
       "with XNACK off the loader rejects an xnack+ object.",
       "Relabel the code object for gfx1010 with xnack- (its code stays as it is).",
       "The XNACK mode the amdgpu driver actually runs (amdgpu.noretry).",
       "retarget-gfx1010", "label the code object xnack-"),
)
CLASS_BY_NAME: dict[str, FindingClass] = {c.name: c for c in CLASSES}
CLASS_BY_CODE: dict[str, FindingClass] = {c.code: c for c in CLASSES}


def lookup(name_or_code: str) -> FindingClass | None:
    """A class by exact name or code, else by case-insensitive name."""
    c = CLASS_BY_NAME.get(name_or_code) or CLASS_BY_CODE.get(name_or_code.upper())
    if c is None:
        low = name_or_code.lower()
        c = next((x for x in CLASSES if x.name.lower() == low), None)
    return c


class Finding:
    """One problem at one address: where the fix goes (for a kernel-level
    problem the kernel descriptor; None for a property of the code object).

    ``Finding(cls, address, detail, mitigation="", addresses=(), fix="",
    blocker=None)``: ``detail`` and ``addresses`` may be functions returning
    them (called on first use: findings can be many, their explanations are
    rarely all read);
    ``mitigation`` defaults to the class's; ``fix`` is the
    rule set that fixes it (the class's by default; None when kpatch cannot)
    and ``blocker`` then says why."""

    __slots__ = ("cls", "address", "_detail", "mitigation", "_addresses", "fix", "blocker")

    def __init__(self, cls: str, address: int | None, detail, mitigation: str = "",
                 addresses=(), fix: str | None = "", blocker: str | None = None):
        c = CLASS_BY_NAME.get(cls)
        if c is None:
            raise ValueError(f"unknown finding class {cls!r}")
        self.cls = cls
        self.address = address
        self._detail = detail  # a string, or a function that makes it (on first use)
        self.mitigation = mitigation or c.mitigation
        self._addresses = addresses if callable(addresses) else tuple(addresses)
        self.fix = c.rule_set if fix == "" else fix
        if self.fix is None and blocker is None:
            blocker = f"{cls}: {c.mitigation}"
        self.blocker = blocker

    @property
    def detail(self) -> str:
        d = self._detail
        if not isinstance(d, str):
            d = self._detail = d()
        return d

    @property
    def addresses(self) -> tuple[int, ...]:
        a = self._addresses
        if callable(a):
            a = self._addresses = tuple(a())
        return a

    @property
    def code(self) -> str:
        return CLASS_BY_NAME[self.cls].code

    def __repr__(self) -> str:
        where = "-" if self.address is None else f"{self.address:#x}"
        return f"Finding({self.cls}, {where}, {self.detail!r})"

    def __eq__(self, other: object) -> bool:
        keys = ("cls", "address", "detail", "mitigation", "addresses", "fix", "blocker")
        return isinstance(other, Finding) and all(getattr(self, a) == getattr(other, a) for a in keys)

    __hash__ = None  # mutable

    def to_dict(self) -> dict:
        d = {"class": self.cls, "code": self.code, "address": self.address, "detail": self.detail,
             "mitigation": self.mitigation}
        if self.addresses:
            d["addresses"] = list(self.addresses)
        if self.fix is None:
            d["blocker"] = self.blocker
        return d
