"""`kpatch extract URI -o FILE`: write out the bytes one URI names."""

from __future__ import annotations

import os
import sys

import click

from kpatch.cli.common import EXIT_OK, err_console
from kpatch.containers.discover import resolve
from kpatch.containers.uri import parse_uri
from kpatch.errors import KpatchError, UsageError
from kpatch.atomicfile import output_errors, write_atomic


@click.command("extract")
@click.argument("uri", metavar="URI")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="File to write.")
@click.option("--force", is_flag=True, help="Overwrite OUTPUT if it exists.")
def extract_cmd(uri: str, output: str, force: bool) -> None:
    """Write the code object (or bundle) that URI names to OUTPUT.

    \b
    URI forms (as `kpatch scan` prints them):
      file:///abs/path                          the whole file
      file:///abs/path#offset=N&size=M          M bytes at offset N
      file:///abs/path#offset=N&size=M&entry=ID entry ID of the bundle at N
      kdb:///abs/db.kdb?name=NAME&args=ARGS     a kernel DB entry (decompressed)
      zip:///abs/x.whl?member=PATH[#...]        a member of a wheel/zip
    A plain path is taken as file:///abs/path.

    \b
    Exit status: 0 when OUTPUT was written; 1 when what URI names cannot
    be read (no such file or entry, malformed container); 2 for a
    malformed URI, an existing OUTPUT without --force, or an OUTPUT that
    cannot be written (e.g. its directory is missing); 3 on an internal
    error.
    """
    where = parse_uri(uri)  # a malformed URI is a usage error
    try:
        data = resolve(where)
    except UsageError as e:  # the input named is not there: it could not be read
        raise KpatchError(e.reason, e.item or uri) from None
    if os.path.exists(output) and not force:
        raise click.UsageError(f"{output} exists (use --force to overwrite)")
    with output_errors(output):
        write_atomic(output, data)
    err_console.print(f"wrote {len(data):,} bytes to {output}", markup=False)
    sys.exit(EXIT_OK)
