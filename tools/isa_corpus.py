"""Shared by tools/isa_agreement.py and tools/bench_disasm.py: the gfx1030
code objects of the downloaded corpus libraries, and their .text."""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from kpatch.containers.bundle import open_bundle_bytes  # noqa: E402
from kpatch.containers.hostelf import find_fatbin_bundles  # noqa: E402

LIBDIR = os.path.join(ROOT, "kdb_cache", "root", "usr", "lib", "x86_64-linux-gnu")
LIBS = ("librocrand.so.1.1", "librocsparse.so.0.1")


def gfx1030_objects(libs=LIBS):
    """Yield (name, code object bytes) of every gfx1030 entry of the libraries."""
    for lib in libs:
        path = os.path.join(LIBDIR, lib)
        if not os.path.exists(path):
            print(f"{path}: missing (tools/fetch_corpus.sh --all)", file=sys.stderr)
            continue
        with open(path, "rb") as fh:
            for n, b in enumerate(find_fatbin_bundles(path)):
                fh.seek(b.offset)
                blob = fh.read(b.size)
                _, bundle, entries = open_bundle_bytes(blob)
                for e in entries:
                    if e.id.endswith("gfx1030"):
                        yield f"{lib}#{n}", bytes(e.data(bundle))


def text_of(path: str) -> tuple[bytes, int, list[int]]:
    """(.text bytes, address, symbol addresses in .text) of a code object
    (read with kpatch.codeobject; pyelftools as a fallback)."""
    try:
        from kpatch.codeobject.model import CodeObject
        with open(path, "rb") as fh:
            co = CodeObject.from_bytes(fh.read())
        sec = co.sections[".text"]
        syms = [s.value for s in co.symbols() if s.table == ".symtab" and s.shndx == sec.index
                and s.type not in (3, 4)]
        return co.text, sec.addr, syms
    except ImportError:
        return _text_of_pyelftools(path)


def _text_of_pyelftools(path: str) -> tuple[bytes, int, list[int]]:
    from elftools.elf.elffile import ELFFile  # (the fallback only: the decode bench's worker does not load it)
    with open(path, "rb") as fh:
        elf = ELFFile(fh)
        idx = next(i for i, s in enumerate(elf.iter_sections()) if s.name == ".text")
        sec = elf.get_section(idx)
        syms = []
        st = elf.get_section_by_name(".symtab")
        if st is not None:
            for s in st.iter_symbols():
                if s["st_shndx"] == idx and s["st_info"]["type"] not in ("STT_SECTION", "STT_FILE"):
                    syms.append(s["st_value"])
        return sec.data(), sec["sh_addr"], syms
