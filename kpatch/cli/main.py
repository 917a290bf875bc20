"""The `kpatch` command: a click group whose subcommands live beside this file."""

from __future__ import annotations

import ast
import importlib
import inspect
import sys
import traceback
from importlib.util import find_spec

import click

from kpatch import __version__
from kpatch.cli import caused_by_interrupt, missing_module_line
from kpatch.cli.common import (
    EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_SOME_FAILED, EXIT_STATUS_HELP, EXIT_USAGE, debug, error_line)
from kpatch.errors import KpatchError, UsageError, disk_full_reason


def interrupted() -> None:
    """Ctrl-C: the one line and exit status 130 (the command's own clean-up has run)."""
    error_line(None, "interrupted")
    sys.exit(EXIT_INTERRUPTED)


#: Every subcommand: its name -> (module, function).  A command's module (and
#: with it numpy, the analysis, the patcher, ...) is imported only when that
#: command runs; `kpatch --help` lists them from their docstrings
#: (:func:`command_docstring`) without importing any.
COMMANDS: dict[str, tuple[str, str]] = {
    "apply": ("kpatch.cli.apply", "apply_cmd"),
    "cache": ("kpatch.cli.warm", "cache_cmd"),
    "diff": ("kpatch.cli.diff", "diff_cmd"),
    "disasm": ("kpatch.cli.disasm", "disasm_cmd"),
    "doctor": ("kpatch.cli.doctor", "doctor_cmd"),
    "explain": ("kpatch.cli.explain", "explain_cmd"),
    "extract": ("kpatch.cli.extract", "extract_cmd"),
    "revert": ("kpatch.cli.revert", "revert_cmd"),
    "rules": ("kpatch.cli.rules", "rules_cmd"),
    "run": ("kpatch.cli.run", "run_cmd"),
    "scan": ("kpatch.cli.scan", "scan_cmd"),
    "selftest": ("kpatch.cli.selftest", "selftest_cmd"),
    "verify": ("kpatch.cli.verify", "verify_cmd"),
    "warm": ("kpatch.cli.warm", "warm_cmd"),
}


def command_docstring(module: str, function: str) -> str:
    """The docstring of ``function`` in ``module`` (a click command), read
    from the module's source without importing it.

    Only the function's ``def`` through the end of its docstring is parsed:
    parsing all 14 command modules cost 20 ms of `kpatch --help`.  If that
    piece does not parse as a function with a docstring, the whole module
    is parsed.
    """
    spec = find_spec(module)
    with open(spec.origin, encoding="utf-8") as f:
        source = f.read()
    start = source.find(f"\ndef {function}(")
    opening = source.find('"""', start) if start >= 0 else -1
    closing = source.find('"""', opening + 3) if opening >= 0 else -1
    if closing >= 0:
        try:
            tree = ast.parse(source[start + 1:closing + 3], spec.origin)
        except SyntaxError:
            tree = None
        else:
            node = tree.body[0] if len(tree.body) == 1 else None
            if isinstance(node, ast.FunctionDef) and node.name == function and ast.get_docstring(node) is not None:
                return inspect.cleandoc(ast.get_docstring(node, clean=False))
    tree = ast.parse(source, spec.origin)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == function:
            return inspect.cleandoc(ast.get_docstring(node, clean=False) or "")
    raise LookupError(f"{module} has no function {function}")


class KpatchGroup(click.Group):
    """The command group: subcommands load on first use (:data:`COMMANDS`);
    a Ctrl-C inside a command is handled here, before click would turn it
    into an Abort after printing a blank line."""

    listing = False  # True while `kpatch --help` lists the commands

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, function = COMMANDS[name]
        if self.listing:  # a stand-in with the command's help text, for its one-line summary
            return click.Command(name, help=command_docstring(module, function))
        return getattr(importlib.import_module(module), function)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self.listing = True
        try:
            super().format_commands(ctx, formatter)
        finally:
            self.listing = False

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
