"""Stable URIs naming one code object wherever it lives.

Forms (every component percent-encoded):

* ``file:///abs/path`` - the whole file is the code object.
* ``file:///abs/path#offset=N&size=M`` - ``M`` bytes at ``N`` in the file (the
  roc-obj convention).  With ``&entry=ID`` the bytes at offset/size are an
  offload bundle (plain or CCOB) and the code object is its entry ``ID``,
  e.g. ``file:///usr/lib/librocrand.so#offset=4096&size=81920&entry=hipv4-amdgcn-amd-amdhsa--gfx1030``.
* ``kdb:///abs/path.kdb?name=NAME&args=ARGS`` - the blob of the MIOpen kernel
  DB entry with that ``kernel_name`` / ``kernel_args`` (decompressed),
  percent-encoded byte for byte as the DB stores them (also bytes that are
  not UTF-8, NUL and newlines).  A fragment ``#entry=ID`` selects a bundle entry when the blob is a bundle.
* ``kdb:///abs/path.kdb?row=N`` - the entry with rowid ``N``; kpatch names a
  row so only when its key cannot be read (e.g. a NULL ``kernel_name``).
* ``zip:///abs/file.whl?member=PATH`` - a member of a zip/wheel, read in
  place; combine with the fragment forms above for bytes inside the member.

``parse(uri)`` and ``format(...)`` are exact inverses for every URI kpatch
prints.  A plain filesystem path is accepted wherever a URI is.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import quote, unquote

from kpatch.errors import UsageError

SCHEMES = ("file", "kdb", "zip")


@dataclass(frozen=True)
class Uri:
    scheme: str  # file | kdb | zip
    path: str  # absolute filesystem path of the outer file
    name: str | None = None  # kdb kernel_name
    args: str | None = None  # kdb kernel_args
    member: str | None = None  # zip member
    offset: int | None = None
    size: int | None = None
    entry: str | None = None  # offload-bundle entry id
    row: int | None = None  # kdb rowid (only for a row whose key cannot be read)

    def __str__(self) -> str:
        return format_uri(self)

    def with_(self, **kw) -> "Uri":
        d = dict(self.__dict__)
        d.update(kw)
        return Uri(**d)


def _q(s: str) -> str:
    # surrogateescape: a kdb key that is not valid UTF-8 (kdb.key_text) keeps its exact bytes
    return quote(s, safe="", errors="surrogateescape")


def format_uri(u: Uri) -> str:
    # (a path that is not valid UTF-8 holds surrogate escapes, as os.fsdecode
    # makes them: its exact bytes are percent-encoded, and parse_uri gives them back)
    out = f"{u.scheme}://{quote(u.path, safe='/', errors='surrogateescape')}"
    query = []
    if u.scheme == "kdb" and u.row is not None:
        query = [("row", str(u.row))]
    elif u.scheme == "kdb":
        query = [("name", u.name or ""), ("args", u.args or "")]
    elif u.scheme == "zip":
        query = [("member", u.member or "")]
    if query:
        out += "?" + "&".join(f"{k}={_q(v)}" for k, v in query)
    frag = []
    if u.offset is not None:
        frag.append(("offset", str(u.offset)))
    if u.size is not None:
        frag.append(("size", str(u.size)))
    if u.entry is not None:
        frag.append(("entry", u.entry))
    if frag:
        out += "#" + "&".join(f"{k}={_q(v)}" for k, v in frag)
    return out


def _pairs(part: str, uri: str) -> dict[str, str]:
    # not parse_qsl: '+' must stay '+' (target ids like gfx90a:xnack+)
    out: dict[str, str] = {}
    for item in filter(None, part.split("&")):
        key, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"URI component {item!r} is not key=value", uri)
        out[unquote(key)] = unquote(value, errors="surrogateescape")
    return out


def _int(field: str, value: str, uri: str, *, signed: bool = False) -> int:
    try:
        n = int(value, 0)
    except ValueError:
        raise UsageError(f"{field}={value!r} is not an integer", uri) from None
    if n < 0 and not signed:
        raise UsageError(f"{field} must not be negative", uri)
    return n


def parse_uri(text: str) -> Uri:
    """Parse a URI (or a plain path) into a :class:`Uri`; raise UsageError."""
    if "://" not in text:
        return Uri("file", os.path.abspath(text))
    scheme, rest = text.split("://", 1)
    if scheme not in SCHEMES:
        raise UsageError(f"unknown URI scheme {scheme!r} (expected one of {', '.join(SCHEMES)})", text)
    frag = ""
    if "#" in rest:
        rest, frag = rest.split("#", 1)
    query = ""
    if "?" in rest:
        rest, query = rest.split("?", 1)
    path = unquote(rest, errors="surrogateescape")
    if not path.startswith("/"):
        raise UsageError("the path in a URI must be absolute (file:///abs/path)", text)
    q = _pairs(query, text)
    f = _pairs(frag, text)
    allowed_query = {"kdb": ("name", "args", "row"), "zip": ("member",), "file": ()}[scheme]
    for k in q:
        if k not in allowed_query:
            raise UsageError(f"unknown URI query key {k!r}", text)
    for k in f:
        if k not in ("offset", "size", "entry"):
            raise UsageError(f"unknown URI fragment key {k!r}", text)
    if scheme == "kdb" and ("row" in q) == ("name" in q or "args" in q):
        raise UsageError("a kdb URI needs ?name=KERNEL_NAME&args=KERNEL_ARGS (or ?row=ROWID)", text)
    if scheme == "kdb" and "row" not in q and ("name" not in q or "args" not in q):
        raise UsageError("a kdb URI needs ?name=KERNEL_NAME&args=KERNEL_ARGS", text)
    if scheme == "zip" and "member" not in q:
        raise UsageError("a zip URI needs ?member=PATH", text)
    if ("offset" in f) != ("size" in f):
        raise UsageError("offset and size go together in a URI fragment", text)
    return Uri(
        scheme=scheme,
        path=path,
        name=q.get("name"),
        args=q.get("args"),
        member=q.get("member"),
        offset=_int("offset", f["offset"], text) if "offset" in f else None,
        size=_int("size", f["size"], text) if "size" in f else None,
        entry=f.get("entry"),
        row=_int("row", q["row"], text, signed=True) if "row" in q else None,
    )


