"""MIOpen kernel databases (``.kdb`` system DBs, ``.ukdb`` user DBs, and
``.kdb.bz2``, a whole system DB compressed with bzip2).

A kernel DB is an SQLite file with one table, ``kern_db`` (schema in
:data:`SCHEMA_SQL`).  Each row holds one linked code object (``kernel_blob``)
keyed by ``(kernel_name, kernel_args)``.  The blob is a bzip2 stream (level 9)
when that is no longer than the code object, with ``uncompressed_size`` its
exact length; otherwise the raw bytes with ``uncompressed_size`` 0.
``kernel_hash`` is the lowercase hex MD5 of the decoded code object, which
MIOpen checks on every load.  See /work/shared/reference/miopen-kdb.md.
"""

from __future__ import annotations

import bz2
import hashlib
import os
import shutil
import sqlite3
import tempfile
import weakref
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterable, Iterator
from urllib.parse import quote

from kpatch.containers import limits
from kpatch.containers.uri import Uri
from kpatch.atomicfile import remove_quietly, replacing
from kpatch.errors import FormatError, UsageError, disk_full_reason

#: What MIOpen executes to create a kernel DB (``KernelConfig::CreateQuery``).
SCHEMA_SQL = (
    "CREATE TABLE IF NOT EXISTS `kern_db` ("
    "`id` INTEGER PRIMARY KEY ASC"
    ",`kernel_name` TEXT NOT NULL"
    ",`kernel_args` TEXT NOT NULL"
    ",`kernel_blob` BLOB NOT NULL"
    ",`kernel_hash` TEXT NOT NULL"
    ",`uncompressed_size` INT NOT NULL"
    ");"
    "CREATE UNIQUE INDEX IF NOT EXISTS `idx_kern_db` ON kern_db(kernel_name, kernel_args);"
)

#: MIOpen's lookup (``KernDb::FindRecordUnsafe``), with the two values it
#: pastes into the SQL text as bound parameters instead.  Keys are bound as
#: the exact bytes of the TEXT value (:func:`key_param`): ``CAST(? AS TEXT)``
#: of a blob is those bytes as TEXT, with no UTF-8 check or normalisation.
SELECT_SQL = (
    "SELECT kernel_blob, kernel_hash, uncompressed_size FROM kern_db "
    "WHERE (kernel_name = CAST(? AS TEXT)) AND (kernel_args = CAST(? AS TEXT));"
)

#: MIOpen's store (``KernDb::StoreRecordUnsafe``), keys bound as :data:`SELECT_SQL` does.
INSERT_SQL = (
    "INSERT OR REPLACE INTO kern_db"
    "(kernel_name, kernel_args, kernel_blob, kernel_hash, uncompressed_size) "
    "VALUES(CAST(? AS TEXT), CAST(? AS TEXT), ?, ?, ?);"
)

#: Columns MIOpen's SELECT and INSERT need.
REQUIRED_COLUMNS = ("kernel_name", "kernel_args", "kernel_blob", "kernel_hash", "uncompressed_size")

#: The columns :func:`_entry` reads (after the id), with the key columns' storage classes.
_ROW_COLUMNS = ("kernel_name, kernel_args, kernel_blob, kernel_hash, uncompressed_size, "
                "typeof(kernel_name), typeof(kernel_args)")

SQLITE_MAGIC = b"SQLite format 3\x00"
_BZ2_BLOCK_MAGICS = (bytes.fromhex("314159265359"), bytes.fromhex("177245385090"))

#: What Python's sqlite3 raises for a corrupt file (a malformed schema can
#: even give an error message that is not UTF-8).
_SQL_ERRORS = (sqlite3.Error, UnicodeDecodeError)

#: MIOpen decompresses into an ``unsigned int``-sized buffer.
MAX_CODE_SIZE = 2**32 - 1


def is_sqlite(first_bytes: bytes) -> bool:
    """Do these leading bytes start an SQLite 3 database file?"""
    return bytes(first_bytes[:16]) == SQLITE_MAGIC


def is_bz2(first_bytes: bytes) -> bool:
    """Do these leading bytes start a bzip2 stream (``BZh1``..``BZh9``, then a
    block or end-of-stream magic when those bytes are present)?"""
    b = bytes(first_bytes[:10])
    if len(b) < 4 or not b.startswith(b"BZh") or b[3:4] not in b"123456789":
        return False
    return len(b) < 10 or b[4:10] in _BZ2_BLOCK_MAGICS


def key_text(stored: bytes) -> str:
    """A key column's stored bytes as the ``str`` kpatch carries: UTF-8, with
    any byte that is not valid UTF-8 (including encoded surrogates) kept as a
    lone surrogate (``surrogateescape``), so :func:`key_param` gives back
    exactly ``stored`` for every byte string.  Nothing is normalised."""
    return stored.decode("utf-8", "surrogateescape")


def key_param(key: str | bytes) -> bytes:
    """The exact stored bytes of a key (the inverse of :func:`key_text`), to
    bind where the SQL says ``CAST(? AS TEXT)``."""
    if isinstance(key, bytes):
        return key
    return key.encode("utf-8", "surrogateescape")


#: (the bytes object hashed last, its digest): reading a row checks its code
#: object's MD5, and patching it hashes the same object again for its
#: provenance record (``source_md5``); a ``bytes`` object cannot change, and
#: holding it keeps its identity from being reused.
_LAST_MD5: tuple = (None, "")


def md5_hex(code: bytes) -> str:
    """MIOpen's ``kernel_hash``: lowercase hex MD5 (the same ``bytes``
    object twice in a row is hashed once)."""
    global _LAST_MD5
    last, digest = _LAST_MD5
    if code is last:
        return digest
    digest = hashlib.md5(code).hexdigest()
    if type(code) is bytes:
        _LAST_MD5 = (code, digest)
    return digest


def encode_blob(code: bytes, md5: str | None = None) -> tuple[bytes, str, int]:
    """``(kernel_blob, kernel_hash, uncompressed_size)`` exactly as MIOpen
    stores ``code``: bzip2 level 9 (Python's bz2 and MIOpen's
    ``BZ2_bzBuffToBuffCompress(..., 9, 0, 30)`` call the same libbz2 and give
    the same bytes) if the result is no longer than ``code``, else the raw
    bytes with size 0.  (MIOpen itself cannot store an empty blob: libbz2
    returns an error for it; here it is stored raw.)  An :class:`EncodedCode`
    gives the encoding it carries.  ``md5``: :func:`md5_hex` of ``code``
    when the caller has it already."""
    if isinstance(code, EncodedCode):
        return code.encoded
    code = bytes(code)
    if md5 is None:
        md5 = md5_hex(code)
    packed = bz2.compress(code, 9)
    if len(packed) <= len(code):
        return packed, md5, len(code)
    return code, md5, 0


class EncodedCode(bytes):
    """Code bytes carrying their :func:`encode_blob` result, made ahead of
    time (``kpatch apply`` compresses changed rows in its worker processes,
    in parallel, rather than one by one where they are written).  Equal to,
    and used as, the plain bytes; pickles with its encoding."""

    encoded: tuple[bytes, str, int]

    @classmethod
    def of(cls, code: bytes, md5: str | None = None) -> "EncodedCode":
        """``code`` with its encoding made now (``md5``: as for :func:`encode_blob`)."""
        return _encoded_code(bytes(code), encode_blob(code, md5))

    def __reduce__(self):
        return _encoded_code, (bytes(self), self.encoded)


def _encoded_code(code: bytes, encoded: tuple[bytes, str, int]) -> EncodedCode:
    out = EncodedCode(code)
    out.encoded = encoded
    return out


def _bunzip2_capped(blob: bytes, size: int) -> bytes:
    """Decompress one bzip2 stream, producing at most ``size + 1`` bytes."""
    d = bz2.BZ2Decompressor()
    try:
        out = d.decompress(blob, max_length=size + 1)
    except (OSError, ValueError, EOFError) as e:
        raise FormatError(f"bz2 stream corrupt: {e}") from None
    if len(out) > size:
        raise FormatError(f"uncompressed_size says {size} but the blob decompresses to more")
    if not d.eof:
        raise FormatError(f"bz2 stream corrupt: truncated after {len(out)} bytes")
    return out


@dataclass(frozen=True)
class KdbEntry:
    """One ``kern_db`` row, as stored.  A row that cannot be read (a NULL or
    non-UTF-8 key or hash, a blob that is not a blob, a size that is not an
    integer, an SQLite error reading just that row) is still an entry, with
    ``error`` saying why; its :meth:`code` raises that.  ``kernel_name`` and
    ``kernel_args`` carry the stored bytes exactly (:func:`key_text`: any
    byte string, valid UTF-8 or not); ``key_readable`` is False only when
    they are not the stored key (a NULL or non-text key, or a row SQLite
    cannot read; then they are a best-effort rendering, for messages only)."""

    id: int
    kernel_name: str
    kernel_args: str
    kernel_blob: bytes
    kernel_hash: str
    uncompressed_size: int
    error: str = ""
    key_readable: bool = True

    @property
    def compressed(self) -> bool:
        return self.uncompressed_size != 0

    def uri(self, db_path: str) -> Uri:
        """This row's URI in the DB at ``db_path``: by its key, or by its row
        id when the key cannot be read."""
        if self.key_readable:
            return Uri("kdb", os.path.abspath(db_path), name=self.kernel_name, args=self.kernel_args)
        return Uri("kdb", os.path.abspath(db_path), row=self.id)

    def code(self, *, max_output: int | None = None) -> bytes:
        """The code object MIOpen would load: the blob bunzip2'ed when
        ``uncompressed_size`` is not 0, else as is; FormatError unless it has
        exactly ``uncompressed_size`` bytes and its MD5 is ``kernel_hash``,
        or when it would be larger than ``max_output`` (default
        :data:`kpatch.containers.limits.MAX_OBJECT_BYTES`).  Decompression
        stops at ``uncompressed_size`` (+1 to detect a lie)."""
        if self.error:
            raise FormatError(self.error)
        cap = limits.MAX_OBJECT_BYTES if max_output is None else max_output
        size = self.uncompressed_size
        if size < 0 or size > MAX_CODE_SIZE:
            raise FormatError(f"uncompressed_size {size} is out of range")
        if size > cap:
            raise FormatError(f"uncompressed_size {size} is more than the limit of {cap} bytes for a code object")
        if size == 0:
            if len(self.kernel_blob) > cap:
                raise FormatError(f"the blob has {len(self.kernel_blob)} bytes, more than the limit of {cap} "
                                  f"bytes for a code object")
            code = bytes(self.kernel_blob)
        else:
            code = _bunzip2_capped(self.kernel_blob, size)
            if len(code) != size:
                raise FormatError(f"uncompressed_size says {size} but the blob decompresses to {len(code)} bytes")
        computed = md5_hex(code)
        if computed != self.kernel_hash:
            raise FormatError(f"MD5 mismatch: stored {self.kernel_hash}, computed {computed}")
        return code


def _shown(value: object) -> str:
    """A stored value rendered for a message."""
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        return repr(value.decode("utf-8", "replace")) if len(value) <= 80 else f"{len(value)} bytes"
    return repr(value)


def _text(value: object, column: str) -> str:
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise FormatError(f"{column} is not UTF-8") from None
    return _not_text(value, column)


def _key(value: object, column: str, stored_as: object = b"text") -> str:
    """A key column as stored (:func:`key_text`); ``stored_as`` is SQLite's
    ``typeof()`` of it: a BLOB is not a key MIOpen's TEXT lookup can match."""
    if isinstance(value, bytes):
        if stored_as == b"blob":
            raise FormatError(f"{column} is stored as a BLOB, not TEXT (MIOpen's lookup never finds this row)")
        return key_text(value)
    return _not_text(value, column)


def _not_text(value: object, column: str) -> str:
    if value is None:
        raise FormatError(f"{column} is NULL")
    raise FormatError(f"{column} is {type(value).__name__} {value!r}, not text")


def _loose_text(value: object) -> str:
    """Best-effort text of a key column that is not valid text (messages only)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return "" if value is None else str(value)


def _entry(rowid: int, row_id: object, name: object, args: object, blob: object, md5: object,
           size: object, name_type: object = b"text", args_type: object = b"text") -> KdbEntry:
    """One row as an entry; a row that cannot be read gives an entry whose
    ``error`` says why (``rowid``: SQLite's rowid, used when ``id`` is bad;
    ``*_type``: SQLite's ``typeof()`` of the key columns)."""
    id_ok = isinstance(row_id, int) and not isinstance(row_id, bool)
    ident = row_id if id_ok else rowid
    try:
        key = (_key(name, "kernel_name", name_type), _key(args, "kernel_args", args_type))
    except FormatError as e:
        return KdbEntry(ident, _loose_text(name), _loose_text(args), b"", "", 0, e.reason, key_readable=False)
    try:
        if not id_ok:
            raise FormatError(f"id {_shown(row_id)} is not an integer")
        if not isinstance(blob, bytes):
            raise FormatError(f"kernel_blob is {_shown(blob)}, not a blob")
        if not isinstance(size, int) or isinstance(size, bool):
            raise FormatError(f"uncompressed_size {_shown(size)} is not an integer")
        md5_text = _text(md5, "kernel_hash")
    except FormatError as e:
        return KdbEntry(ident, *key, b"", "", 0, e.reason)
    return KdbEntry(ident, *key, blob, md5_text, size)


def _sqlite_uri(path: str, **params: str) -> str:
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return f"file:{quote(os.path.abspath(path))}?{query}"


def _read_head(path: str, n: int = 16) -> bytes:
    limits.check_regular_file(path)
    try:
        with open(path, "rb") as f:
            return f.read(n)
    except OSError as e:
        raise UsageError(f"cannot read: {e.strerror}", path) from None


def _bunzip2_file(src: str, dst_fd: int, max_output: int | None = None) -> None:
    """Stream-decompress the bzip2 file ``src`` (all streams) into ``dst_fd``,
    at most ``max_output`` bytes (default
    :data:`kpatch.containers.limits.MAX_KDB_BYTES`) and never filling the
    file system it writes to."""
    cap = limits.MAX_KDB_BYTES if max_output is None else max_output
    try:
        with bz2.open(src, "rb") as fin, os.fdopen(dst_fd, "wb") as fout:
            limits.copy_capped(fin, fout, cap, "the decompressed kernel DB")
    except FormatError as e:
        raise e.with_item(src)
    except (OSError, EOFError, ValueError) as e:
        raise FormatError(f"bz2 stream corrupt: {e}", src) from None


class KernelDB:
    """An open MIOpen kernel DB.  Use :meth:`open` or :meth:`create`; close
    it (or use ``with``) when done.  ``path`` is the path given; ``db_path``
    the SQLite file actually read (a temporary file for ``.kdb.bz2``)."""

    def __init__(self, conn: sqlite3.Connection, path: str, db_path: str, *, writable: bool, temp: bool = False):
        self._conn = conn
        self.path = path
        self.db_path = db_path
        self.writable = writable
        self._finalizer = weakref.finalize(self, remove_quietly, db_path) if temp else None

    # --- opening ---------------------------------------------------------

    @classmethod
    def open(
        cls, path: str, *, writable: bool = False, cache_dir: str | None = None, max_output: int | None = None,
        busy_timeout: float = 5.0, create: bool = False,
    ) -> "KernelDB":
        """Open a ``.kdb``, ``.ukdb`` or ``.kdb.bz2``.

        A ``.kdb.bz2`` (recognised by its bytes) is decompressed by streaming
        into a temporary file (removed on close) or, with ``cache_dir``, into a
        cache file reused while the source's size and mtime stay the same; it
        is always read-only.  FormatError if the file is not SQLite, is
        corrupt, or lacks ``kern_db`` with the columns MIOpen needs, or when
        ``kern_db`` is not a plain table (a view could run any query).
        ``max_output``: cap on a ``.kdb.bz2``'s decompressed size (default
        :data:`kpatch.containers.limits.MAX_KDB_BYTES`).  Every statement
        on the DB is bounded (:func:`_connect`).

        ``writable`` opens read-write, as MIOpen opens a user DB: SQLite's
        locking is shared with every other process (MIOpen) that has the DB
        open, and a statement waits up to ``busy_timeout`` seconds for
        another process's write to end.  With ``create`` a missing file
        becomes a new DB with MIOpen's schema in WAL mode, as MIOpen creates
        a user DB.  A writable DB whose main file is still empty (a DB
        another process just created: its first pages are in its ``-wal``)
        is opened through SQLite rather than refused.
        """
        if create and not os.path.lexists(path):
            return cls._open_created(path, busy_timeout)
        head = _read_head(path)
        db_path, temp = path, False
        if is_bz2(head):
            if writable:
                raise UsageError("a .kdb.bz2 can only be opened read-only", path)
            db_path, temp = _decompressed_copy(path, cache_dir, max_output)
        try:
            head = _read_head(db_path)
            if not head and not writable:
                raise FormatError("not a MIOpen kernel DB: empty file", path)
            if head and not is_sqlite(head):
                raise FormatError(f"not an SQLite database (starts with {head[:8]!r})", path)
            conn = _connect(db_path, writable=writable, immutable=temp, busy_timeout=busy_timeout)
        except BaseException:
            if temp:
                remove_quietly(db_path)
            raise
        db = cls(conn, path, db_path, writable=writable, temp=temp)
        with db._closed_on_failure():
            db._validate()
        return db

    @classmethod
    def _open_created(cls, path: str, busy_timeout: float) -> "KernelDB":
        """A new user DB at ``path`` (or the one another process created
        meanwhile), with MIOpen's schema, in WAL mode."""
        conn = _connect(path, writable=True, immutable=False, busy_timeout=busy_timeout, create=True)
        db = cls(conn, path, path, writable=True)
        with db._closed_on_failure():
            db._exec("PRAGMA journal_mode=WAL;")
            db._exec("BEGIN IMMEDIATE;")
            for statement in filter(None, (s.strip() for s in SCHEMA_SQL.split(";"))):
                db._exec(statement + ";")
            db._exec("COMMIT;")
            db._validate()
        return db

    @contextmanager
    def _closed_on_failure(self):
        """Close this DB if what the block does to set it up fails."""
        try:
            yield
        except BaseException:
            self.close()
            raise

    @classmethod
    def create(cls, path: str, *, user: bool = True) -> "KernelDB":
        """Create a new, empty DB with MIOpen's schema (WAL journal for a user
        DB); UsageError if ``path`` exists."""
        if os.path.lexists(path):
            raise UsageError("already exists; open it with writable=True instead", path)
        return cls._create(path, user=user)

    @classmethod
    def _create(cls, path: str, *, user: bool) -> "KernelDB":
        try:
            conn = sqlite3.connect(path, isolation_level=None)
        except sqlite3.Error as e:
            raise UsageError(f"cannot create kernel DB: {e}", path) from None
        conn.text_factory = bytes
        db = cls(conn, path, path, writable=True)
        try:
            if user:
                db._exec("PRAGMA journal_mode=WAL;")
            conn.executescript(SCHEMA_SQL)
            db._exec("BEGIN;")
        except BaseException:
            db.close()
            raise
        return db

    def _validate(self) -> None:
        kinds = self._rows("SELECT type, sql FROM sqlite_master WHERE name = 'kern_db' COLLATE NOCASE;")
        if not kinds:
            raise FormatError("not a MIOpen kernel DB: no table kern_db", self.path)
        kind, sql = (_loose_text(v) for v in kinds[0])
        if kind != "table":
            raise FormatError(f"not a MIOpen kernel DB: kern_db is a {kind}, not a table", self.path)
        if sql.lstrip().upper().startswith("CREATE VIRTUAL"):
            raise FormatError("not a MIOpen kernel DB: kern_db is a virtual table", self.path)
        rows = self._rows("PRAGMA table_info(kern_db);")
        columns = {r[1].decode("utf-8", "replace") if isinstance(r[1], bytes) else r[1] for r in rows}
        missing = [c for c in REQUIRED_COLUMNS if c not in columns]
        if missing:
            raise FormatError(f"not a MIOpen kernel DB: table kern_db lacks {', '.join(missing)}", self.path)
        self._id_column = "id" if "id" in columns else "rowid"
        try:
            self._conn.execute("SELECT rowid FROM kern_db LIMIT 0;")
        except _SQL_ERRORS:
            raise FormatError("not a MIOpen kernel DB: kern_db is a WITHOUT ROWID table", self.path) from None

    # --- reading ---------------------------------------------------------

    def _exec(self, sql: str, params: tuple = ()) -> sqlite3.Cursor:
        budget = getattr(self._conn, "_kpatch_budget", None)
        if budget is not None:
            budget.reset()
        try:
            return self._conn.execute(sql, params)
        except _SQL_ERRORS as e:
            raise FormatError(_sql_reason(e, self._conn), self.path) from None

    def _rows(self, sql: str, params: tuple = (), *, limit: int | None = None) -> list[tuple]:
        """Run a query and fetch (up to ``limit``) rows; FormatError on any
        SQLite failure, including ones only found while stepping, and when
        the statement exceeds its work budget."""
        cur = self._exec(sql, params)
        try:
            return cur.fetchall() if limit is None else cur.fetchmany(limit)
        except _SQL_ERRORS as e:
            raise FormatError(_sql_reason(e, self._conn), self.path) from None

    def count(self) -> int:
        """Number of rows in ``kern_db``."""
        return int(self._rows("SELECT COUNT(*) FROM kern_db;")[0][0])

    def entries(self) -> Iterator[KdbEntry]:
        """All rows, lazily, in rowid order (MIOpen's ``id`` is the rowid).
        A row that cannot be read is an entry with ``error`` set (see
        :class:`KdbEntry`); only a failure to list the rows at all is a
        FormatError, raised before any entry."""
        idc = getattr(self, "_id_column", "id")
        rowids = [r[0] for r in self._rows("SELECT rowid FROM kern_db ORDER BY rowid;")]
        select = (f"SELECT {idc}, {_ROW_COLUMNS} FROM kern_db WHERE rowid = ?;")
        for rowid in rowids:
            try:
                rows = self._rows(select, (rowid,))
            except FormatError as e:
                yield KdbEntry(rowid, "", "", b"", "", 0, e.reason, key_readable=False)
                continue
            if rows:  # (gone since listed: only if someone writes the file meanwhile)
                yield _entry(rowid, *rows[0])

    def get(self, kernel_name: str, kernel_args: str) -> KdbEntry | None:
        """The row MIOpen's lookup finds for this key (via :data:`SELECT_SQL`),
        or None."""
        key = (key_param(kernel_name), key_param(kernel_args))
        rows = self._rows(SELECT_SQL, key, limit=1)  # MIOpen takes the first row
        if not rows:
            return None
        idc = getattr(self, "_id_column", "id")
        ids = self._rows(f"SELECT {idc} FROM kern_db WHERE (kernel_name = CAST(? AS TEXT)) "
                         f"AND (kernel_args = CAST(? AS TEXT));", key, limit=1)
        blob, md5, size = rows[0]
        row_id = ids[0][0] if ids else -1
        return _entry(row_id if isinstance(row_id, int) else -1, row_id, *key, blob, md5, size)

    def row(self, rowid: int) -> KdbEntry | None:
        """The row with this rowid (see :meth:`KdbEntry.uri`), or None."""
        idc = getattr(self, "_id_column", "id")
        rows = self._rows(f"SELECT {idc}, {_ROW_COLUMNS} FROM kern_db WHERE rowid = ?;", (rowid,), limit=1)
        return _entry(rowid, *rows[0]) if rows else None

    # --- writing ---------------------------------------------------------

    def put(self, kernel_name: str, kernel_args: str, code: bytes) -> None:
        """Store ``code`` under this key as MIOpen does (INSERT OR REPLACE,
        blob from :func:`encode_blob`).  Call :meth:`commit` to make it stick."""
        if not self.writable:
            raise UsageError("kernel DB is open read-only", self.path)
        blob, md5, size = encode_blob(code)
        if not self._conn.in_transaction:
            self._exec("BEGIN;")
        self._exec(INSERT_SQL, (key_param(kernel_name), key_param(kernel_args), blob, md5, size))

    def commit(self) -> None:
        if self._conn.in_transaction:
            self._exec("COMMIT;")

    @contextmanager
    def write_transaction(self) -> Iterator["KernelDB"]:
        """One write transaction (``BEGIN IMMEDIATE``: it waits up to the
        busy timeout for another process's write, then holds SQLite's write
        lock): committed when the block ends, rolled back if it raises."""
        if not self.writable:
            raise UsageError("kernel DB is open read-only", self.path)
        self._exec("BEGIN IMMEDIATE;")
        try:
            yield self
        except BaseException:
            if self._conn is not None and self._conn.in_transaction:
                self._conn.rollback()
            raise
        self._exec("COMMIT;")

    def put_row(self, kernel_name: str | bytes, kernel_args: str | bytes, blob: bytes, md5: str,
                size: int) -> None:
        """Store an already encoded row (:func:`encode_blob`) as MIOpen's INSERT OR REPLACE does."""
        if not self.writable:
            raise UsageError("kernel DB is open read-only", self.path)
        self._exec(INSERT_SQL, (key_param(kernel_name), key_param(kernel_args), blob, md5, size))

    def delete(self, kernel_name: str | bytes, kernel_args: str | bytes) -> None:
        """Remove the row with this key (if any)."""
        if not self.writable:
            raise UsageError("kernel DB is open read-only", self.path)
        self._exec("DELETE FROM kern_db WHERE (kernel_name = CAST(? AS TEXT)) AND (kernel_args = CAST(? AS TEXT));",
                   (key_param(kernel_name), key_param(kernel_args)))

    def integrity(self) -> str:
        """SQLite's ``PRAGMA integrity_check`` result: ``ok``, or its first complaints."""
        rows = self._rows("PRAGMA integrity_check(10);")
        text = "; ".join(" ".join(_loose_text(r[0]).split()) for r in rows)
        return text or "no result"

    def close(self) -> None:
        """Close the connection (uncommitted writes are rolled back) and remove
        a temporary decompressed copy."""
        if self._conn is not None:
            try:
                if self._conn.in_transaction:
                    self._conn.rollback()
            finally:
                self._conn.close()
                self._conn = None
        if self._finalizer is not None:
            self._finalizer()

    def __enter__(self) -> "KernelDB":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Budget:
    """SQLite progress handler: interrupts a statement after
    :data:`kpatch.containers.limits.MAX_SQL_STEPS` virtual-machine steps
    (``reset`` before each statement)."""

    def __init__(self) -> None:
        self.calls = 0
        self.exceeded = False

    def reset(self) -> None:
        self.calls = 0
        self.exceeded = False

    def __call__(self) -> int:
        self.calls += 1
        if self.calls * limits.SQL_STEP_CHECK >= limits.MAX_SQL_STEPS:
            self.exceeded = True
            return 1
        return 0


def _sql_reason(e: Exception, conn: sqlite3.Connection) -> str:
    budget = getattr(conn, "_kpatch_budget", None)
    if budget is not None and budget.exceeded:
        return f"SQLite query stopped after {limits.MAX_SQL_STEPS} steps (the limit for one statement)"
    return disk_full_reason(e) or f"SQLite error: {e}"  # a full disk is not a broken file


class _Connection(sqlite3.Connection):
    """A connection that can carry its work budget."""

    _kpatch_budget: _Budget | None = None


def _bound(conn: sqlite3.Connection) -> None:
    """Bound what any statement on ``conn`` may cost: its VM steps
    (:class:`_Budget`), and the length of any string or blob to
    :data:`kpatch.containers.limits.MAX_OBJECT_BYTES`; and trust nothing in
    the schema (no functions with side effects from views or triggers)."""
    budget = _Budget()
    conn._kpatch_budget = budget
    conn.set_progress_handler(budget, limits.SQL_STEP_CHECK)
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max(limits.MAX_OBJECT_BYTES, 1 << 20))
    conn.execute("PRAGMA trusted_schema = OFF;")


def _connect(db_path: str, *, writable: bool, immutable: bool, busy_timeout: float = 5.0,
             create: bool = False) -> sqlite3.Connection:
    """Open the SQLite file (read-only unless ``writable``; created when
    missing with ``create``), bound its work (:func:`_bound`), wait up to
    ``busy_timeout`` seconds for other processes' locks, and read its schema;
    read-only opens fall back to ``immutable=1`` when SQLite cannot open a
    WAL database read-only (no -shm file and a read-only directory)."""
    if writable:
        attempts = [{"mode": "rwc" if create else "rw"}]
    elif immutable:
        attempts = [{"mode": "ro", "immutable": "1"}]
    else:
        attempts = [{"mode": "ro"}, {"mode": "ro", "immutable": "1"}]
    for n, params in enumerate(attempts, 1):
        conn = None
        try:
            conn = sqlite3.connect(_sqlite_uri(db_path, **params), uri=True, isolation_level=None,
                                   factory=_Connection, timeout=busy_timeout)
            conn.text_factory = bytes
            _bound(conn)
            conn._kpatch_budget.reset()
            conn.execute("SELECT 1 FROM sqlite_master LIMIT 1;").fetchall()
            return conn
        except sqlite3.OperationalError as e:
            reason = _sql_reason(e, conn) if conn is not None else f"SQLite error: {e}"
            if conn is not None:
                conn.close()
            if n == len(attempts):
                raise FormatError(f"cannot open as SQLite: {reason}", db_path) from None
        except _SQL_ERRORS as e:
            if conn is not None:
                conn.close()
            raise FormatError(f"cannot open as SQLite: {e}", db_path) from None
    raise AssertionError("unreachable")


def _decompressed_copy(path: str, cache_dir: str | None, max_output: int | None) -> tuple[str, bool]:
    """Decompress ``path`` (a bzip2'ed kdb) to a file; return (file, is_temp)."""
    if cache_dir is None:
        fd, tmp = tempfile.mkstemp(prefix="kpatch-", suffix=".kdb")
        try:
            _bunzip2_file(path, fd, max_output)
        except BaseException:
            remove_quietly(tmp)
            raise
        return tmp, True
    st = os.stat(path)
    base = os.path.basename(path)
    base = base[:-4] if base.endswith(".bz2") else base
    cached = os.path.join(cache_dir, f"{base}.{st.st_size}-{st.st_mtime_ns}.kdb")
    if os.path.exists(cached):
        return cached, False
    os.makedirs(cache_dir, exist_ok=True)
    with replacing(cached, prefix=f".{base}.", suffix=".tmp") as (fd, _):
        _bunzip2_file(path, fd, max_output)
    return cached, False


def write_kdb(path: str, items: Iterable[tuple[str, str, bytes]], *, user: bool) -> None:
    """Write a new kernel DB holding ``items`` ((kernel_name, kernel_args,
    code) triples, later duplicates replacing earlier ones as in MIOpen) to
    ``path``, atomically: everything goes to a temporary file in the same
    directory, which replaces ``path`` only once complete.  Refuses to replace
    a DB that has a non-empty ``-wal`` file (SQLite would replay it onto the
    new file)."""
    wal = path + "-wal"
    if os.path.exists(wal) and os.path.getsize(wal) > 0:
        raise UsageError("has a non-empty -wal file (is MIOpen running?); not replacing it", path)
    with replacing(path, prefix=f".{os.path.basename(path)}.", suffix=".tmp",
                   leftovers=("-wal", "-shm", "-journal")) as (fd, tmp):
        os.close(fd)
        remove_quietly(tmp)  # SQLite creates it; mkstemp only picked a free name
        db = KernelDB._create(tmp, user=user)
        try:
            for name, args, code in items:
                db.put(name, args, code)
            db.commit()
        finally:
            db.close()
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        if os.path.exists(path):
            shutil.copymode(path, tmp)
