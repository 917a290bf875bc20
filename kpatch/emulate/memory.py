"""Memory seen by emulated kernels: global buffers, LDS and private memory.

Global memory is a set of :class:`Buffer` objects at fixed addresses in one
64-bit address space; an access by any active lane to an address no buffer
covers is a :class:`~kpatch.emulate.errors.MemoryFault`.  Accesses are
vectorised over the lanes of a wave: an address array in, a value array out.
Multi-byte values are little-endian and may be unaligned (the hardware
allows unaligned global access in HSA mode).

LDS is one byte array per workgroup; as on the hardware, an LDS access past
the workgroup's allocation reads 0 and a write there is dropped.  Private
(scratch) memory is one byte array per lane; an access past it is a fault.
"""

from __future__ import annotations

import numpy as np

from kpatch.emulate.errors import MemoryFault

#: Apertures (the high 32 bits of flat addresses that reach LDS and private
#: memory; ``src_shared_base`` / ``src_private_base`` return them).
SHARED_APERTURE_HI = 0x00010000
PRIVATE_APERTURE_HI = 0x00020000
#: Base address of the sentinel buffer resource the dispatch gives kernels as
#: their private segment buffer: MUBUF accesses through it go to the lane's
#: private memory.  A resource's base is 48 bits (dword 1 bits 16-29 are the
#: stride), so the sentinel is a 48-bit address no buffer reaches (buffers are
#: placed upwards from 4 GiB).
SCRATCH_RSRC_BASE = 0xFFFF_0000_0000


class LazyBytes:
    """``size`` bytes of seeded random data made a page at a time, when an
    access first touches the page (a buffer as large as a kernel's tensors
    without holding them all).  Indexing with an int array reads and
    assigns like a numpy uint8 array; :meth:`page` gives a page (made if
    untouched), :attr:`pages` the pages touched.  Two objects with the same
    size and seed hold the same bytes."""

    PAGE = 1 << 16

    def __init__(self, size: int, seed: int, head: bytes = b""):
        self.size, self.seed, self.head = size, seed, bytes(head)
        self.pages: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return self.size

    def page(self, p: int) -> np.ndarray:
        a = self.pages.get(p)
        if a is None:
            start = p * self.PAGE
            n = min(self.PAGE, self.size - start)
            a = np.random.default_rng([self.seed, p]).integers(0, 256, n, dtype=np.uint8)
            if start < len(self.head):
                h = np.frombuffer(self.head[start:start + n], np.uint8)
                a[:len(h)] = h
            self.pages[p] = a
        return a

    def _split(self, idx: np.ndarray):
        flat = np.asarray(idx, np.int64).ravel()
        pg = flat // self.PAGE
        for p in np.unique(pg):
            sel = pg == p
            yield self.page(int(p)), sel, flat[sel] - int(p) * self.PAGE

    def __getitem__(self, idx: np.ndarray) -> np.ndarray:
        out = np.empty(np.shape(idx), np.uint8)
        flat = out.reshape(-1)
        for page, sel, off in self._split(idx):
            flat[sel] = page[off]
        return out

    def __setitem__(self, idx: np.ndarray, values: np.ndarray) -> None:
        vals = np.asarray(values, np.uint8).reshape(-1)
        for page, sel, off in self._split(idx):
            page[off] = vals[sel]


class Buffer:
    """One global allocation: ``size`` bytes at ``base`` (``data`` is a numpy
    uint8 array, or :class:`LazyBytes`)."""

    __slots__ = ("name", "base", "data", "readonly")

    def __init__(self, name: str, base: int, data: np.ndarray, readonly: bool = False):
        self.name = name
        self.base = base
        self.data = data
        self.readonly = readonly

    @property
    def size(self) -> int:
        return len(self.data)


class Memory:
    """The global address space of one dispatch."""

    def __init__(self):
        self.buffers: list[Buffer] = []
        self._bases = np.zeros(0, np.uint64)
        self._next = 0x100000000  # first buffer at 4 GiB: small integers are never valid pointers

    def allocate(self, name: str, data: bytes | np.ndarray, align: int = 256, *, base: int | None = None,
                 readonly: bool = False) -> Buffer:
        """Place a copy of ``data`` at a fresh address (with an unmapped gap
        after it), or at ``base``."""
        arr = np.frombuffer(bytes(data), np.uint8).copy() if not isinstance(data, np.ndarray) \
            else data.astype(np.uint8, copy=True).reshape(-1)
        if base is None:
            base = (self._next + align - 1) // align * align
            self._next = base + len(arr) + 0x10000
        for b in self.buffers:
            if base < b.base + b.size and b.base < base + len(arr):
                raise ValueError(f"buffer {name} at {base:#x} overlaps {b.name}")
        b = Buffer(name, base, arr, readonly)
        self.buffers.append(b)
        self.buffers.sort(key=lambda x: x.base)
        self._bases = np.array([x.base for x in self.buffers], np.uint64)
        self._sizes = np.array([x.size for x in self.buffers], np.uint64)
        return b

    def allocate_lazy(self, name: str, data: LazyBytes, align: int = 256) -> Buffer:
        """Place a :class:`LazyBytes` buffer at a fresh address (with an unmapped gap after it)."""
        base = (self._next + align - 1) // align * align
        self._next = base + len(data) + 0x10000
        b = Buffer(name, base, data)
        self.buffers.append(b)
        self.buffers.sort(key=lambda x: x.base)
        self._bases = np.array([x.base for x in self.buffers], np.uint64)
        self._sizes = np.array([x.size for x in self.buffers], np.uint64)
        return b

    def _locate(self, addr: np.ndarray, nbytes: int, what: str):
        """(buffer index per lane, offset per lane); faults if any lane is outside."""
        idx = np.searchsorted(self._bases, addr, side="right").astype(np.int64) - 1
        ok = idx >= 0
        sizes = self._sizes if len(self._bases) else np.zeros(1, np.uint64)
        bases = self._bases if len(self._bases) else np.zeros(1, np.uint64)
        safe = np.where(ok, idx, 0)
        off = addr - bases[safe]
        ok &= (off + np.uint64(nbytes)) <= sizes[safe]
        ok &= addr >= bases[safe]
        if not ok.all():
            bad = int(addr[~ok][0])
            raise MemoryFault(f"{what} of {nbytes} bytes at {bad:#x}, outside every buffer")
        return safe, off.astype(np.int64)

    def read(self, addr: np.ndarray, nbytes: int) -> np.ndarray:
        """``nbytes`` bytes at each address: uint8 array (lanes, nbytes)."""
        addr = np.asarray(addr, np.uint64)
        out = np.empty((len(addr), nbytes), np.uint8)
        if len(addr) == 0:
            return out
        bi, off = self._locate(addr, nbytes, "read")
        for b in np.unique(bi):
            sel = bi == b
            data = self.buffers[b].data
            out[sel] = data[off[sel][:, None] + np.arange(nbytes)]
        return out

    def write(self, addr: np.ndarray, values: np.ndarray) -> None:
        """Write ``values`` (uint8 array (lanes, nbytes)) lane by lane in lane order."""
        addr = np.asarray(addr, np.uint64)
        if len(addr) == 0:
            return
        nbytes = values.shape[1]
        bi, off = self._locate(addr, nbytes, "write")
        for b in np.unique(bi):
            sel = bi == b
            if self.buffers[b].readonly:
                raise MemoryFault(f"write to read-only {self.buffers[b].name} at {int(addr[sel][0]):#x}")
            data = self.buffers[b].data
            data[off[sel][:, None] + np.arange(nbytes)] = values[sel]

    def image(self) -> list[tuple[str, object]]:
        """Every buffer's name and current bytes (what a comparison looks at;
        a :class:`LazyBytes` buffer as itself: its untouched pages are its
        seed's)."""
        return [(b.name, b.data if isinstance(b.data, LazyBytes) else b.data.tobytes())
                for b in self.buffers if not b.readonly]

    def read_scalar(self, addr: int, nbytes: int) -> bytes:
        """``nbytes`` at one address (scalar memory reads)."""
        return self.read(np.array([addr], np.uint64), nbytes)[0].tobytes()


def to_bytes(words: np.ndarray, nbytes: int) -> np.ndarray:
    """uint32 array (lanes, ndwords) -> uint8 array (lanes, nbytes), little-endian."""
    w = np.ascontiguousarray(words, dtype="<u4")
    return w.view(np.uint8).reshape(len(w), -1)[:, :nbytes]


def from_bytes(b: np.ndarray, ndwords: int) -> np.ndarray:
    """uint8 array (lanes, nbytes) -> uint32 array (lanes, ndwords), zero-padded."""
    out = np.zeros((len(b), ndwords * 4), np.uint8)
    out[:, :b.shape[1]] = b
    return out.view("<u4").reshape(len(b), ndwords).astype(np.uint32)


class LocalMemory:
    """LDS of one workgroup (reads past the end give 0, writes there are dropped)."""

    def __init__(self, size: int):
        self.data = np.zeros(size, np.uint8)

    def read(self, addr: np.ndarray, nbytes: int) -> np.ndarray:
        addr = np.asarray(addr, np.int64)
        if len(self.data) == 0:
            return np.zeros((len(addr), nbytes), np.uint8)
        idx = addr[:, None] + np.arange(nbytes)
        ok = (idx >= 0) & (idx < len(self.data))
        return np.where(ok, self.data[np.where(ok, idx, 0)], 0).astype(np.uint8)

    def write(self, addr: np.ndarray, values: np.ndarray) -> None:
        addr = np.asarray(addr, np.int64)
        idx = addr[:, None] + np.arange(values.shape[1])
        ok = (idx >= 0) & (idx < len(self.data))
        # lane order: numpy fancy assignment keeps the last write to an index
        self.data[idx[ok]] = values[ok]


class PrivateMemory:
    """Private (scratch) memory: ``size`` bytes for each lane of one wave."""

    def __init__(self, lanes: int, size: int):
        self.data = np.zeros((lanes, max(size, 0)), np.uint8)

    def _idx(self, lanes: np.ndarray, addr: np.ndarray, nbytes: int):
        addr = np.asarray(addr, np.int64)
        if len(addr) and ((addr < 0).any() or (addr + nbytes > self.data.shape[1]).any()):
            bad = int(addr[(addr < 0) | (addr + nbytes > self.data.shape[1])][0])
            raise MemoryFault(f"private access of {nbytes} bytes at offset {bad:#x}, "
                              f"outside the {self.data.shape[1]}-byte private segment")
        return lanes[:, None], addr[:, None] + np.arange(nbytes)

    def read(self, lanes: np.ndarray, addr: np.ndarray, nbytes: int) -> np.ndarray:
        li, bi = self._idx(lanes, addr, nbytes)
        return self.data[li, bi]

    def write(self, lanes: np.ndarray, addr: np.ndarray, values: np.ndarray) -> None:
        li, bi = self._idx(lanes, addr, values.shape[1])
        self.data[li, bi] = values
