"""The `kpatch` command: a click group whose subcommands live beside this file."""

from __future__ import annotations

import sys
import traceback

import click

from kpatch import __version__
from kpatch.cli import caused_by_interrupt, missing_module_line
from kpatch.cli.apply import apply_cmd
from kpatch.cli.common import (
    EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_SOME_FAILED, EXIT_STATUS_HELP, EXIT_USAGE, debug, error_line)
from kpatch.cli.diff import diff_cmd
from kpatch.cli.disasm import disasm_cmd
from kpatch.cli.explain import explain_cmd
from kpatch.cli.extract import extract_cmd
from kpatch.cli.revert import revert_cmd
from kpatch.cli.rules import rules_cmd
from kpatch.cli.run import run_cmd
from kpatch.cli.warm import cache_cmd, warm_cmd
from kpatch.cli.scan import scan_cmd
from kpatch.cli.verify import verify_cmd
from kpatch.errors import KpatchError, UsageError, disk_full_reason


def interrupted() -> None:
    """Ctrl-C: the one line and exit status 130 (the command's own clean-up has run)."""
    error_line(None, "interrupted")
    sys.exit(EXIT_INTERRUPTED)


class KpatchGroup(click.Group):
    """The command group; a Ctrl-C inside a command is handled here, before
    click would turn it into an Abort after printing a blank line."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            interrupted()


@click.group(cls=KpatchGroup, context_settings={"help_option_names": ["-h", "--help"]}, epilog=EXIT_STATUS_HELP)
@click.version_option(__version__, prog_name="kpatch")
def cli() -> None:
    """kpatch: make gfx1030 (RDNA2) GPU kernels safe on gfx1010 (RX 5600 XT / 5700 XT).

    It finds AMD GPU code objects wherever ROCm keeps them (MIOpen kernel
    DBs, clang offload bundles, fat binaries in shared libraries), decodes
    them, and reports what they contain.

    Run `kpatch COMMAND --help` for each command.  Set KPATCH_DEBUG=1 to see
    Python tracebacks for internal errors.
    """


cli.add_command(scan_cmd)
cli.add_command(extract_cmd)
cli.add_command(disasm_cmd)
cli.add_command(explain_cmd)
cli.add_command(apply_cmd)
cli.add_command(revert_cmd)
cli.add_command(diff_cmd)
cli.add_command(rules_cmd)
cli.add_command(run_cmd)
cli.add_command(warm_cmd)
cli.add_command(cache_cmd)
cli.add_command(verify_cmd)


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.ClickException as e:
        e.show()
        sys.exit(EXIT_USAGE)
    except (click.exceptions.Abort, KeyboardInterrupt):  # Ctrl-C outside a command (e.g. while parsing)
        interrupted()
    except UsageError as e:
        error_line(e.item, e.reason)
        sys.exit(EXIT_USAGE)
    except KpatchError as e:
        error_line(e.item, e.reason)
        sys.exit(EXIT_SOME_FAILED)
    except BrokenPipeError:
        sys.exit(EXIT_SOME_FAILED)
    except ImportError as e:  # a module imported on first use is missing from the environment
        if debug():
            traceback.print_exc()
        print(missing_module_line(e), file=sys.stderr)
        sys.exit(EXIT_INTERNAL)
    except Exception as e:
        if caused_by_interrupt(e):  # Ctrl-C surfacing as another error (e.g. inside an import)
            error_line(None, "interrupted")
            sys.exit(EXIT_INTERRUPTED)
        if (full := disk_full_reason(e)) is not None:  # the machine's condition, not a bug
            if debug():
                traceback.print_exc()
            error_line(getattr(e, "filename", None), full)
            sys.exit(EXIT_SOME_FAILED)
        # a bug in kpatch: one line, traceback only on request
        if debug():
            traceback.print_exc()
        error_line(None, f"internal error: {type(e).__name__}: {e} (set KPATCH_DEBUG=1 for a traceback)")
        sys.exit(EXIT_INTERNAL)
