"""The installed package carries every subpackage and its data."""

import os
import tomllib

from conftest import ROOT


def test_every_package_is_listed_in_pyproject():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        listed = set(tomllib.load(f)["tool"]["setuptools"]["packages"])
    on_disk = set()
    for dirpath, _dirs, filenames in os.walk(os.path.join(ROOT, "kpatch")):
        if "__init__.py" in filenames and "__pycache__" not in dirpath:
            on_disk.add(os.path.relpath(dirpath, ROOT).replace(os.sep, "."))
    assert on_disk <= listed, f"add to pyproject's packages: {sorted(on_disk - listed)}"
    assert "kpatch.rules_data" in listed


def test_builtin_rules_and_sample_are_reachable():
    from kpatch.data import sample_db_path
    from kpatch.rewrite.rules import builtin_dir

    assert os.path.isfile(sample_db_path())
    assert os.path.isdir(builtin_dir())


# --- dependencies: exactly what kpatch/ imports ---------------------------------

import ast
import re
import subprocess
import sys

# import name -> distribution name, where they differ
DISTRIBUTION_OF = {"elftools": "pyelftools"}
# standalone scripts run by the user's Python (the one with torch), never imported by kpatch
USER_PYTHON_SCRIPTS = {os.path.join("kpatch", "fieldkit", "cases.py"), os.path.join("kpatch", "fieldkit", "probe.py")}


def _third_party_imports() -> set[str]:
    found = set()
    for dirpath, _dirs, filenames in os.walk(os.path.join(ROOT, "kpatch")):
        for fn in filenames:
            if not fn.endswith(".py") or os.path.relpath(os.path.join(dirpath, fn), ROOT) in USER_PYTHON_SCRIPTS:
                continue
            with open(os.path.join(dirpath, fn), encoding="utf-8") as f:
                tree = ast.parse(f.read(), fn)
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    found.update(a.name.split(".")[0] for a in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    found.add(node.module.split(".")[0])
    return {DISTRIBUTION_OF.get(m, m) for m in found
            if m not in sys.stdlib_module_names and m not in ("kpatch", "__future__")}


def _declared() -> set[str]:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        deps = tomllib.load(f)["project"]["dependencies"]
    return {re.match(r"[A-Za-z0-9_.-]+", d).group(0).lower() for d in deps}


def test_declared_dependencies_are_exactly_the_imported_ones():
    imported = {m.lower() for m in _third_party_imports()}
    declared = _declared()
    assert imported - declared == set(), "kpatch/ imports these but pyproject does not declare them"
    assert declared - imported == set(), "pyproject declares these but kpatch/ never imports them"


def test_the_import_scan_sees_every_kind_of_import(tmp_path):
    # the checker itself: a module importing numpy inside a function is seen
    src = "def f():\n    import numpy.linalg as la\n    from rich.console import Console\n"
    tree = ast.parse(src)
    names = {n.names[0].name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert names == {"numpy", "rich"}
    assert "numpy" in _third_party_imports() and "pyelftools" in _third_party_imports()


def _run_without(module: str, *argv: str) -> subprocess.CompletedProcess:
    code = (f"import sys; sys.modules[{module!r}] = None; sys.argv = ['kpatch', *{list(argv)!r}]; "
            "from kpatch.cli import entry; entry()")
    env = {k: v for k, v in os.environ.items() if k != "KPATCH_DEBUG"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env)


def test_a_missing_dependency_is_one_line_not_a_traceback():
    for module, argv in (("click", ("scan", "@sample")), ("numpy", ("scan", "--target", "gfx1010", "@sample"))):
        r = _run_without(module, *argv)
        assert r.returncode == 3, (module, r.stderr)
        assert "Traceback" not in r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and repr(module) in lines[0] and "pip install" in lines[0], r.stderr


def test_no_stray_files_and_the_license_the_metadata_names():
    assert not [f for f in os.listdir(ROOT) if f.endswith(".whl")]
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        lic = tomllib.load(f)["project"]["license"]
    assert os.path.isfile(os.path.join(ROOT, lic["file"]))
