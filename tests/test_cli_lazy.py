"""`kpatch --help`, `kpatch explain` and `kpatch rules` load no heavy module;
the command list they print is the one the commands themselves give."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest

from kpatch.cli.main import COMMANDS, cli, command_docstring

HEAVY = ("numpy", "kpatch.analysis.engine", "kpatch.rewrite.patcher", "kpatch.rewrite.fixes", "kpatch.isa.bulk",
         "kpatch.apply", "kpatch.diff")

PROBE = """
import sys
sys.argv = ["kpatch"] + sys.argv[1:]
from kpatch.cli import entry
try:
    entry()
except SystemExit:
    pass
print(" ".join(m for m in {heavy!r} if m in sys.modules), file=sys.stderr)
"""


def _imports_none(args: list[str], modules: tuple[str, ...]) -> None:
    """`kpatch ARGS` prints, and imports none of ``modules``."""
    p = subprocess.run([sys.executable, "-c", PROBE.format(heavy=modules), *args],
                       capture_output=True, text=True, check=True)
    loaded = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
    assert loaded == "", f"kpatch {' '.join(args)} imported {loaded}"
    assert p.stdout  # it did print


@pytest.mark.parametrize("args", [["--help"], ["explain"], ["explain", "H002"], ["rules"], ["rules", "KH001"],
                                  ["scan", "@sample"]])
def test_light_commands_import_no_heavy_module(args):
    _imports_none(args, HEAVY)


#: what listing rules needs none of: the code-object model and the header editor
#: (the rule loader checks header actions against kpatch.rewrite.headeractions)
NOT_FOR_RULES = ("kpatch.codeobject", "kpatch.rewrite.headers", "kpatch.elf.reader")


@pytest.mark.parametrize("args", [["explain"], ["rules"], ["rules", "KH001"]])
def test_listing_rules_reads_no_code_object_module(args):
    _imports_none(args, NOT_FOR_RULES)


#: what neither `--help`, `explain` nor listing the built-in rules needs: rich (about 40 ms to import; they
#: print with click) and the ISA tables (the built-in rules' sequences are built by the tests and by every
#: patching run, not to list them)
NOT_FOR_LISTING = ("rich", "rich.console", "kpatch.isa.decoder", "kpatch.isa.tables", "kpatch.isa.build")


@pytest.mark.parametrize("args", [["--help"], ["explain"], ["explain", "H002"], ["rules"], ["rules", "KH001"],
                                  ["rules", "gfx1010-hazards"]])
def test_listing_imports_neither_rich_nor_the_isa_tables(args):
    _imports_none(args, NOT_FOR_LISTING)


def _whole_module_docstring(path: str, function: str) -> str:
    """The reference: the docstring as the whole module's syntax tree has it."""
    import ast
    import inspect

    tree = ast.parse(open(path, encoding="utf-8").read())
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function)
    return inspect.cleandoc(ast.get_docstring(node, clean=False) or "")


def test_docstring_read_from_the_function_alone_is_the_whole_modules():
    from importlib.util import find_spec

    for module, function in COMMANDS.values():
        assert command_docstring(module, function) == _whole_module_docstring(find_spec(module).origin, function)


@pytest.mark.parametrize("source", [
    # a triple-quoted default before the docstring: the piece up to the first closing quotes is no function
    'def cmd(x="""a"""):\n    """Real summary.\n\n    More."""\n    return x\n',
    # an escaped quote run inside the docstring: the piece ends inside the string
    'def cmd():\n    """Says \\""" inside.\n\n    More."""\n',
    # no docstring: the next function's string must not be taken for it
    'def cmd():\n    return 1\n\n\ndef other():\n    """Not for cmd."""\n',
])
def test_docstring_falls_back_to_the_whole_module(tmp_path, monkeypatch, source):
    (tmp_path / "kp_doc_probe.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert command_docstring("kp_doc_probe", "cmd") == _whole_module_docstring(str(tmp_path / "kp_doc_probe.py"),
                                                                                "cmd")


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_listed_summary_is_the_commands_own(name):
    module, function = COMMANDS[name]
    real = cli.get_command(click.Context(cli), name)
    assert isinstance(real, click.Command) and real.name == name
    stand_in = click.Command(name, help=command_docstring(module, function))
    for limit in (20, 45, 60, 74, 200):
        assert stand_in.get_short_help_str(limit) == real.get_short_help_str(limit)


def test_unknown_command_is_a_usage_error():
    from click.testing import CliRunner
    r = CliRunner().invoke(cli, ["nosuch"])
    assert r.exit_code == 2 and "No such command 'nosuch'" in r.output
