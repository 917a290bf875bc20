"""The package's data flows one way (ARCHITECTURE.md): a module imports only
from its own folder or folders to its left, and no modules import each other
in a cycle, not even through imports made inside functions."""

from __future__ import annotations

import ast
import pathlib

import kpatch

ROOT = pathlib.Path(kpatch.__file__).parent

#: ARCHITECTURE.md's flow: each layer may import from the layers before it.
LAYERS = [
    {"errors", "atomicfile", "data", "elf"},
    {"containers"},
    {"codeobject"},
    {"isa"},
    {"analysis", "emulate"},
    {"rewrite"},
    {"miopen"},
    {"apply", "diff"},
    {"delivery"},
    {"fieldkit"},
    {"cli"},
]
RANK = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for p in ROOT.rglob("*.py"):
        parts = list(p.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = p
    return out


def _imports(path: pathlib.Path, name: str, is_pkg: bool) -> set[str]:
    """Every kpatch module ``path`` imports, anywhere in it."""
    found = set()
    package = name if is_pkg else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("kpatch.")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            if base.startswith("kpatch"):
                found.add(base)
                found |= {f"{base}.{a.name}" for a in node.names}
    return found


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    graph = {}
    for name, path in mods.items():
        deps = {d for d in _imports(path, name, path.name == "__init__.py") if d in mods and d != name}
        graph[name] = deps
    return graph


def _folder(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_every_folder_is_in_the_flow():
    folders = {_folder(m) for m in _graph()} - {"", "__main__"}
    assert folders <= set(RANK), f"folders ARCHITECTURE.md does not place: {sorted(folders - set(RANK))}"


def test_imports_flow_one_way():
    wrong = []
    for module, deps in _graph().items():
        here = RANK.get(_folder(module))
        for d in deps:
            there = RANK.get(_folder(d))
            if here is not None and there is not None and there > here:
                wrong.append(f"{module} -> {d}")
    assert wrong == []


def test_no_import_cycles():
    graph = {m: {d for d in deps if not graph_is_package_init(d, m)} for m, deps in _graph().items()}
    cycles, state, stack = [], {}, []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for d in sorted(graph.get(m, ())):
            if state.get(d) == 1:
                cycles.append(stack[stack.index(d):] + [d])
            elif d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    assert cycles == []


def graph_is_package_init(dep: str, module: str) -> bool:
    """A package's ``__init__`` re-exporting its own modules is not a cycle
    of concepts: ``kpatch.isa`` -> ``kpatch.isa.decoder`` -> ``kpatch.isa``
    is one folder importing itself."""
    return module.startswith(dep + ".") or dep.startswith(module + ".")
