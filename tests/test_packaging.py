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
