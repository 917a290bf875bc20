"""NSAtoVMEMBug, NSAClauseBug, NSAMaxSize: NSA-encoded image instructions.

An NSA MIMG instruction carries ``nsa`` extra dwords of four 8-bit address
registers each, so it has at most 1 + 4 * nsa addresses and more than
1 + 4 * (nsa - 1): two or more NSA dwords mean 6 or more addresses, beyond
gfx1010's limit of 5, and a size of 16 bytes or more (NSAtoVMEMBug's
trigger).  ``s_clause simm16`` makes the next simm16 + 1 instructions a hard
clause; an NSAClauseBug finding is reported at each NSA instruction in one.
"""

from __future__ import annotations

from kpatch.analysis.detectors.context import Context
from kpatch.analysis.facts import M_BUFFER, M_CLAUSE, M_NSA
from kpatch.analysis.findings import Finding
from kpatch.isa.operands import clause_length

GFX1010_NSA_MAX_ADDRESSES = 5
NSA_VMEM_MIN_SIZE = 16  # bytes of an NSA MIMG that triggers NSAtoVMEMBug
_BUFFER_FORMATS = ("MUBUF", "MTBUF")


def _long_nsa(f) -> bool:
    return f.nsa > 0 and f.size >= NSA_VMEM_MIN_SIZE


def detect(ctx: Context) -> list[Finding]:
    facts = ctx.facts
    insts = ctx.insts
    nsa = ctx.marked(M_NSA)
    if not nsa:
        return []
    out: list[Finding] = []
    for k in nsa:
        f = facts[k]
        if f.nsa >= 2:
            out.append(Finding("NSAMaxSize", insts[k].address,
                               f"{insts[k].text()}: {f.nsa} NSA dwords, more than "
                               f"{GFX1010_NSA_MAX_ADDRESSES} addresses"))
    cfg = ctx.cfg
    for k in ctx.marked(M_CLAUSE | M_BUFFER):
        f = facts[k]
        if f.mnemonic == "s_clause":
            length = clause_length(f.simm16)
            for j in range(k + 1, min(len(facts), k + 1 + length)):
                if facts[j].nsa:
                    out.append(Finding("NSAClauseBug", insts[j].address,
                                       f"NSA {insts[j].text()} is inside the s_clause of {length} at "
                                       f"{insts[k].address:#x}", addresses=(insts[k].address,)))
        elif insts[k].format in _BUFFER_FORMATS and (f.offset or 0) & 6:
            b = cfg.block_at(k)
            prev = [k - 1] if k > cfg.block_start[b] else [int(cfg.block_end[p]) - 1 for p in cfg.preds[b]]
            bad = [j for j in prev if _long_nsa(facts[j])]
            if bad:
                out.append(Finding("NSAtoVMEMBug", insts[k].address,
                                   f"{insts[k].text()} right after NSA {insts[bad[0]].text()}",
                                   addresses=tuple(insts[j].address for j in bad)))
    return sorted(out, key=lambda x: x.address)
