"""Find every AMDGPU code object under a set of paths, and resolve URIs.

``discover(paths)`` walks files, directories (recursively), MIOpen kernel DBs,
offload bundles (plain and CCOB), host ELF files with ``.hip_fatbin`` and
wheels/zips, and yields one :class:`Found` per code object or one
:class:`Problem` per item that could not be read.  A problem never stops the
walk.  ``resolve(uri)`` returns the bytes one URI names.

Containers are told apart by their magic bytes, not their file names (except
``.kdb.bz2``, whose magic is just bzip2's).
"""

from __future__ import annotations

import lzma
import os
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from kpatch.containers import bundle as bundle_fmt
from kpatch.containers import hostelf, kdb, limits
from kpatch.containers.uri import Uri, parse_uri
from kpatch.data import expand
from kpatch.elf.reader import ELF_MAGIC, EM_AMDGPU
from kpatch.errors import FormatError, KpatchError, UsageError, internal_reason

ZIP_MAGIC = b"PK\x03\x04"
#: Zip compression methods Python's zipfile reads (stored, deflate, bzip2, LZMA).
ZIP_METHODS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflate",
               zipfile.ZIP_BZIP2: "bzip2", zipfile.ZIP_LZMA: "lzma"}
#: What reading a damaged zip member can raise besides FormatError.
_ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError, RuntimeError,
               NotImplementedError, zlib.error, lzma.LZMAError)
SQLITE_MAGIC = b"SQLite format 3\x00"
AMDGPU_ENTRY_MARK = "amdgcn-amd-amdhsa"


@dataclass
class Found:
    """One code object: where it lives and its bytes."""

    uri: Uri
    container: str  # e.g. "hsaco", "bundle", "ccob", "kdb", "kdb/bundle", "fatbin/bundle", "wheel/fatbin/ccob"
    data: bytes
    origin: dict = field(default_factory=dict)  # kernel_name/kernel_args/bundle_entry where relevant


@dataclass
class Problem:
    """An item that could not be read, with a one-line reason."""

    uri: str
    error: str


Item = Found | Problem


def sniff(head: bytes, name: str = "") -> str | None:
    """Classify a file by its first bytes: hsaco, hostelf, bundle, ccob, kdb, kdb.bz2, zip or None."""
    if head.startswith(ELF_MAGIC):
        if len(head) >= 20 and int.from_bytes(head[18:20], "little") == EM_AMDGPU:
            return "hsaco"
        return "hostelf"
    if head.startswith(bundle_fmt.BUNDLE_MAGIC):
        return "bundle"
    if head.startswith(bundle_fmt.CCOB_MAGIC):
        return "ccob"
    if head.startswith(SQLITE_MAGIC):
        return "kdb"
    if head.startswith(b"BZh") and name.endswith(".kdb.bz2"):
        return "kdb.bz2"
    if head.startswith(ZIP_MAGIC):
        return "zip"
    return None


def _is_amdgpu_entry(entry_id: str) -> bool:
    return AMDGPU_ENTRY_MARK in entry_id


def _bundle_items(
    data: bytes, base: Uri, container: str, *, file_offset: int | None, addressable: bool
) -> Iterator[Item]:
    """Code objects inside bundle bytes ``data`` (plain or CCOB).

    ``file_offset`` is where ``data`` starts in the file ``base`` names (None
    when the bundle is not a byte range of a file, e.g. a kdb blob).  Entries
    of an uncompressed bundle in a file are named by offset/size; entries of
    a CCOB or of a blob by ``entry=ID``.
    """
    try:
        kind, plain, entries = bundle_fmt.open_bundle_bytes(data)
    except KpatchError as e:
        yield Problem(str(base), e.reason)
        return
    label = f"{container}/{kind}" if container else kind
    for e in entries:
        if not _is_amdgpu_entry(e.id) or e.size == 0:
            continue
        blob = bytes(plain[e.offset : e.offset + e.size])
        if kind == "bundle" and addressable and file_offset is not None:
            uri = base.with_(offset=file_offset + e.offset, size=e.size, entry=None)
        elif file_offset is not None:
            uri = base.with_(offset=file_offset, size=len(data), entry=e.id)
        else:
            uri = base.with_(entry=e.id)
        yield Found(uri, label, blob, {"bundle_entry": e.id})


def _kdb_items(path: str, base: Uri, container: str) -> Iterator[Item]:
    """Every code object of a kernel DB; a row that cannot be read (or
    whose blob is bad) is one Problem and the other rows go on."""
    try:
        db = kdb.KernelDB.open(path)
    except KpatchError as e:
        yield Problem(str(base), e.reason)
        return
    label = f"{container}/kdb" if container else "kdb"
    with db:
        try:
            entries = db.entries()
            for entry in entries:
                uri = entry.uri(base.path)
                try:
                    code = entry.code()
                except KpatchError as e:
                    yield Problem(str(uri), e.reason)
                    continue
                except Exception as e:  # a bug: this row only
                    yield Problem(str(uri), internal_reason(e))
                    continue
                origin = {"kernel_name": entry.kernel_name, "kernel_args": entry.kernel_args}
                if code.startswith(bundle_fmt.BUNDLE_MAGIC) or code.startswith(bundle_fmt.CCOB_MAGIC):
                    for item in _bundle_items(code, uri, label, file_offset=None, addressable=False):
                        if isinstance(item, Found):
                            item.origin = {**origin, **item.origin}
                        yield item
                else:
                    yield Found(uri, label, code, origin)
        except KpatchError as e:  # the rows cannot even be listed
            yield Problem(str(base), e.reason)


def _hostelf_items(path: str, base: Uri, container: str) -> Iterator[Item]:
    try:
        bundles = hostelf.find_fatbin_bundles(path)
    except KpatchError as e:
        yield Problem(str(base), e.reason)
        return
    if not bundles:
        return
    label = f"{container}/fatbin" if container else "fatbin"
    # one bundle in memory at a time (pread, not a mapping that would keep
    # every page of a 1.3 GB library resident), read into one buffer kept
    # from bundle to bundle: its code objects are copied out of it anyway
    buf = bytearray(max((b.size for b in bundles if b.size <= limits.MAX_OBJECT_BYTES), default=0))
    with open(path, "rb") as f:
        for b in bundles:
            if b.size > limits.MAX_OBJECT_BYTES:
                yield Problem(str(base.with_(offset=b.offset, size=b.size)),
                              f"bundle of {b.size} bytes is larger than the limit of {limits.MAX_OBJECT_BYTES} bytes")
                continue
            view = memoryview(buf)[:b.size]
            try:
                got = os.preadv(f.fileno(), [view], b.offset) if b.size else 0
                if got != b.size:
                    yield Problem(str(base.with_(offset=b.offset, size=b.size)),
                                  "bundle lies beyond the end of the file")
                    continue
                yield from _bundle_items(view, base, label, file_offset=b.offset, addressable=True)
            finally:
                view.release()


def _read_object(path: str) -> bytes:
    """A whole file that is one code object or bundle (capped)."""
    with open(path, "rb") as f:
        return limits.read_capped(f, limits.MAX_OBJECT_BYTES, "the file")


def _file_items(path: str, base: Uri, container: str, explicit: bool) -> Iterator[Item]:
    """Everything in one regular file (``path`` on disk, named ``base``);
    anything else (a FIFO, a device) is a Problem and is never opened."""
    try:
        limits.check_regular_file(path)
        with open(path, "rb") as f:
            head = f.read(64)
    except KpatchError as e:
        yield Problem(str(base), e.reason)
        return
    except OSError as e:
        yield Problem(str(base), e.strerror or str(e))
        return
    kind = sniff(head, path)
    if kind is None:
        if explicit:
            yield Problem(str(base), "not a code object, offload bundle, kernel DB, ELF file or wheel")
        return
    try:
        if kind == "hsaco":
            yield Found(base, f"{container}/hsaco" if container else "hsaco", _read_object(path))
        elif kind in ("bundle", "ccob"):
            yield from _bundle_items(_read_object(path), base, container, file_offset=0, addressable=True)
        elif kind in ("kdb", "kdb.bz2"):
            yield from _kdb_items(path, base, container)
        elif kind == "hostelf":
            yield from _hostelf_items(path, base, container)
        elif kind == "zip":
            yield from _zip_items(path, base)
    except KpatchError as e:
        yield Problem(str(base), e.reason)
    except OSError as e:
        yield Problem(str(base), e.strerror or str(e))


def _member_problem(info: zipfile.ZipInfo) -> str | None:
    """Why a zip member cannot be read, known from its header alone."""
    if info.flag_bits & 0x1:
        return "the member is encrypted"
    if info.compress_type not in ZIP_METHODS:
        return f"unsupported compression method {info.compress_type}"
    if info.file_size > limits.MAX_ZIP_MEMBER_BYTES:
        return f"the member is {info.file_size} bytes, larger than the limit of {limits.MAX_ZIP_MEMBER_BYTES} bytes"
    return None


def _zip_items(path: str, base: Uri) -> Iterator[Item]:
    """Members of a wheel/zip, each read from the archive (never unpacked as a tree).

    A member's bytes go to one temporary file at a time (host libraries are
    mmapped from it), which is deleted before the next member; an
    encrypted member, an unknown compression method or a member larger than
    :data:`kpatch.containers.limits.MAX_ZIP_MEMBER_BYTES` is a Problem.
    """
    try:
        zf = zipfile.ZipFile(path)
    except _ZIP_ERRORS as e:
        yield Problem(str(base), f"not a readable zip/wheel: {e}")
        return
    with zf:
        for info in zf.infolist():
            if info.is_dir():
                continue
            member_uri = Uri("zip", base.path, member=info.filename)
            problem = _member_problem(info)
            if problem:
                yield Problem(str(member_uri), problem)
                continue
            try:
                with zf.open(info) as m:
                    head = m.read(64)
                kind = sniff(head, info.filename)
                if kind is None or kind == "zip":
                    continue
                with tempfile.TemporaryDirectory(prefix="kpatch-") as tmp:
                    tmp_path = os.path.join(tmp, "member")
                    with zf.open(info) as m, open(tmp_path, "wb") as out:
                        limits.copy_capped(m, out, limits.MAX_ZIP_MEMBER_BYTES, "the member")
                    for item in _file_items(tmp_path, member_uri, "wheel", explicit=False):
                        yield item
            except KpatchError as e:
                yield Problem(str(member_uri), e.reason)
            except _ZIP_ERRORS as e:
                yield Problem(str(member_uri), f"cannot read zip member: {e}")


def iter_files(root: str) -> Iterator[str]:
    """Regular files under ``root`` in a stable order, not following directory symlinks."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            if os.path.isfile(full) and not os.path.islink(full):
                yield full


def discover(paths: Iterable[str], on_file: Callable[[str], None] | None = None) -> Iterator[Item]:
    """Yield every code object (Found) and every unreadable item (Problem) under ``paths``.

    Each path may be a file, a directory or a URI (then just that code
    object).  ``on_file`` is called with each file path as it is opened (for
    progress reporting).
    """
    for p in map(expand, paths):
        if "://" in p:
            try:
                uri = parse_uri(p)
                data = resolve(uri)
            except KpatchError as e:
                yield Problem(p, e.reason)
                continue
            yield Found(uri, "uri", data)
            continue
        path = os.path.abspath(p)
        if os.path.isdir(path):
            for f in iter_files(path):
                if on_file:
                    on_file(f)
                yield from _file_items(f, Uri("file", f), "", explicit=False)
        elif os.path.lexists(path):
            if on_file:
                on_file(path)
            yield from _file_items(path, Uri("file", path), "", explicit=True)
        else:
            yield Problem(str(Uri("file", path)), "no such file or directory")


def _read_range(path: str, offset: int | None, size: int | None) -> bytes:
    limits.check_regular_file(path)
    with open(path, "rb") as f:
        if offset is None:
            return limits.read_capped(f, limits.MAX_OBJECT_BYTES, "the file")
        end = f.seek(0, os.SEEK_END)
        if offset + size > end:
            raise UsageError(f"offset {offset} + size {size} lies beyond the end of the file ({end} bytes)")
        if size > limits.MAX_OBJECT_BYTES:
            raise FormatError(f"{size} bytes is larger than the limit of {limits.MAX_OBJECT_BYTES} bytes")
        f.seek(offset)
        return f.read(size)


def _select_entry(data: bytes, entry: str) -> bytes:
    _, plain, entries = bundle_fmt.open_bundle_bytes(data)
    for e in entries:
        if e.id == entry:
            return bytes(plain[e.offset : e.offset + e.size])
    raise UsageError(f"the bundle has no entry {entry!r} (it has: {', '.join(e.id for e in entries)})")


def _read_member(path: str, member: str) -> bytes:
    """A zip member's bytes (capped at :data:`kpatch.containers.limits.MAX_OBJECT_BYTES`)."""
    limits.check_regular_file(path)
    try:
        with zipfile.ZipFile(path) as zf:
            try:
                info = zf.getinfo(member)
            except KeyError:
                raise UsageError(f"the archive has no member {member!r}") from None
            problem = _member_problem(info)
            if problem:
                raise FormatError(problem)
            with zf.open(info) as m:
                return limits.read_capped(m, limits.MAX_OBJECT_BYTES, "the member")
    except _ZIP_ERRORS as e:
        raise FormatError(f"not a readable zip/wheel: {e}") from None


def resolve(uri: Uri) -> bytes:
    """The bytes a URI names (a code object, or the bundle/file when it names
    one); never more than :data:`kpatch.containers.limits.MAX_OBJECT_BYTES`."""
    try:
        if uri.scheme == "kdb":
            if not os.path.lexists(uri.path):
                raise UsageError("no such kernel DB")
            with kdb.KernelDB.open(uri.path) as db:
                if uri.row is not None:
                    entry = db.row(uri.row)
                    if entry is None:
                        raise UsageError(f"no entry with rowid {uri.row}")
                else:
                    entry = db.get(uri.name or "", uri.args or "")
                    if entry is None:
                        raise UsageError(f"no entry kernel_name={uri.name!r} kernel_args={uri.args!r}")
                data = entry.code()
        elif uri.scheme == "zip":
            data = _read_member(uri.path, uri.member or "")
            if uri.offset is not None:
                if uri.offset + uri.size > len(data):
                    raise UsageError("offset + size lie beyond the end of the member")
                data = data[uri.offset : uri.offset + uri.size]
        else:
            if not os.path.lexists(uri.path):
                raise UsageError("no such file")
            data = _read_range(uri.path, uri.offset, uri.size)
        if uri.entry is not None:
            data = _select_entry(data, uri.entry)
        return data
    except OSError as e:
        raise UsageError(e.strerror or str(e), str(uri)) from None
    except KpatchError as e:
        e.item = None if e.item in (uri.path, None) else e.item
        raise e.with_item(str(uri))
