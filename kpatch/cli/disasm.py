"""`kpatch disasm`: GFX10 disassembly in llvm-objdump-16's syntax."""

from __future__ import annotations

import json
import sys

import click

from kpatch.cli.common import EXIT_OK, EXIT_SOME_FAILED, error_line, err_console, flush_stdout
from kpatch.codeobject import CodeObject
from kpatch.containers.discover import Found, Problem, discover
from kpatch.errors import KpatchError
from kpatch.isa import TARGETS
from kpatch.isa.instruction import Instruction
from kpatch.isa.bulk import Columns
from kpatch.isa.lines import disassemble_ids
from kpatch.isa.text import address_lines_of, objdump_lines_of
from kpatch.diff.functions import text_symbols
from kpatch.diff.functions import decode_target

FORMATS = ("text", "lines", "json")


def _kernel_range(co: CodeObject, name: str) -> tuple[int, int] | None:
    """[start, end) of the kernel ``name`` (or ``NAME.kd``) in ``.text``
    (:meth:`CodeObject.function_extents`), or None."""
    k = co.kernel(name)
    e = co.function_extent(k.name) if k is not None else None
    return (e.start, e.end) if e is not None and e.kind == "kernel" else None


def disasm_object(found: Found, co: CodeObject, target: str, kernel: str | None, fmt: str) -> tuple[list[str], dict]:
    """Lines of output (text/lines) and a JSON record for one code object."""
    text = co.section(".text")
    if text is None:
        raise KpatchError("the code object has no .text section")
    symbols = text_symbols(co)
    cols = disassemble_ids(co.text, target, text.addr, [a for a, _ in symbols])
    if kernel is not None:
        rng = _kernel_range(co, kernel)
        if rng is None:
            raise KpatchError(f"no kernel {kernel!r} (kernels: {', '.join(k.name for k in co.kernels) or 'none'})")
        addrs = cols.address_list()
        keep = [k for k, a in enumerate(addrs) if rng[0] <= a < rng[1]]
        cols = Columns([addrs[k] for k in keep], cols.ids[keep], cols.table)
    names = dict(symbols)
    lines: list[str] = []
    if fmt == "lines":
        lines = address_lines_of(cols)
    elif fmt == "text":
        lines.append(f"{found.uri}:\tfile format elf64-amdgpu, decoded as {target}")
        lines.append("")
        lines.append("Disassembly of section .text:")
        lines += objdump_lines_of(cols, names)
    insts = list(map(Instruction, cols.address_list(), cols.ds())) if fmt == "json" else []
    record = {
        "uri": str(found.uri),
        "target": co.target_id,
        "decoded_as": target,
        "instructions": [
            {
                "address": i.address,
                "size": i.size,
                "format": i.format,
                "mnemonic": i.mnemonic,
                "text": i.text(),
                "encoding": i.raw.hex(),
            }
            for i in insts
        ]
        if fmt == "json"
        else [],
    }
    return lines, record


@click.command("disasm")
@click.argument("inputs", nargs=-1, required=True, metavar="FILE_OR_URI...")
@click.option("--mcpu", type=click.Choice(sorted(TARGETS)), help="Decode as this target (default: the object's own).")
@click.option("--kernel", "kernel", metavar="NAME", help="Only this kernel (its code: the symbol's size, or up to the next function).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="text", show_default=True,
              help="text: like llvm-objdump -d; lines: ADDRESS<TAB>TEXT per instruction; json: one document.")
def disasm_cmd(inputs: tuple[str, ...], mcpu: str | None, kernel: str | None, fmt: str) -> None:
    """Disassemble the GFX10 code in FILE_OR_URI... (gfx1010 or gfx1030).

    Inputs are anything `kpatch scan` reads (code objects, bundles, host
    libraries, kernel DBs, wheels, URIs); every gfx1010/gfx1030 code object
    in them is disassembled.  Objects for other targets are skipped unless
    --mcpu says how to decode them.

    \b
    --format lines prints, per instruction, its address in hex (the virtual
    address llvm-objdump-16 shows), a tab, and the text exactly as
    `llvm-objdump-16 -d --mcpu=TARGET` prints it, without the trailing
    `// address: encoding` comment.  Encodings kpatch (like LLVM) cannot
    decode print as `<unknown>`.

    \b
    Exit status: 0 when every input was read and something was
    disassembled; 1 when some input could not be read (each named on
    stderr; the rest is still printed) or nothing matched (no gfx1010/
    gfx1030 code object, no kernel --kernel); 2 for usage errors; 3 on
    an internal error.
    """
    errors = 0
    records = []
    skipped: dict[str, int] = {}
    done = 0
    for item in discover(list(inputs)):
        if isinstance(item, Problem):
            error_line(item.uri, item.error)
            errors += 1
            continue
        try:
            co = CodeObject.from_bytes(item.data, name=str(item.uri), lossless=False)  # (read only)
            target = decode_target(co, mcpu)
            if target is None:
                skipped[co.target_id or "unknown"] = skipped.get(co.target_id or "unknown", 0) + 1
                continue
            if kernel is not None and co.kernel(kernel) is None:
                continue
            lines, record = disasm_object(item, co, target, kernel, fmt)
        except KpatchError as e:
            error_line(str(item.uri), e.reason)
            errors += 1
            continue
        done += 1
        if fmt == "json":
            records.append(record)
        else:
            if done > 1 and fmt == "text":
                sys.stdout.write("\n")
            sys.stdout.write("\n".join(lines) + ("\n" if lines else ""))
    if fmt == "json":
        json.dump({"code_objects": records}, sys.stdout, indent=1)
        sys.stdout.write("\n")
    flush_stdout()
    if skipped:
        what = ", ".join(f"{n} {t}" for t, n in sorted(skipped.items()))
        err_console.print(f"skipped code objects for targets kpatch does not decode: {what} "
                          f"(use --mcpu to force a table)", markup=False)
    if done == 0 and not errors:
        error_line(None, f"no kernel {kernel!r} found" if kernel else "no gfx1010/gfx1030 code object found")
        errors += 1
    sys.exit(EXIT_SOME_FAILED if errors else EXIT_OK)
