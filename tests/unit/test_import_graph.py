"""The packages import in one direction: no module reaches, directly or through others, back to
itself. Lazy imports inside functions count (they are still a circle a reader must untangle);
imports only for type checkers do not."""

import ast
from importlib.util import find_spec
from pathlib import Path

import daccore

PACKAGES = ("daccore", "dacctl", "dacd", "daclocal")


def modules() -> dict[str, Path]:
    """Every module of the four packages, from wherever they are installed."""
    found = {}
    for package in PACKAGES:
        root = Path(find_spec(package).origin).parent
        for path in root.rglob("*.py"):
            rel = path.relative_to(root).parts
            if package == "daccore" and rel[0] == "share" and len(rel) > 2:
                continue  # the playbooks' own Ansible module: data, not part of the graph
            parts = (package, *path.relative_to(root).with_suffix("").parts)
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (
        getattr(test, "id", None) == "TYPE_CHECKING"
        or getattr(test, "attr", None) == "TYPE_CHECKING"
    )


def imports_of(path: Path, known: set[str]) -> set[str]:
    deps: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking_only(child):
                for other in child.orelse:
                    visit(other)
                continue
            if isinstance(child, ast.Import):
                deps.update(a.name for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and not child.level:
                deps.add(child.module)
                deps.update(f"{child.module}.{a.name}" for a in child.names)
            visit(child)

    visit(ast.parse(path.read_text()))
    return {d for d in deps if d in known}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_module_imports_itself_back():
    found = modules()
    graph = {name: imports_of(path, set(found)) - {name} for name, path in found.items()}
    assert len(graph) > 50 and "daccore.etcd.client" in graph  # the walk found the packages
    assert circles(graph) == []


def test_the_check_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_daccore_imports_nothing_of_the_programs():
    found = modules()
    for name, path in found.items():
        if name.startswith("daccore"):
            wrong = {d for d in imports_of(path, set(found)) if not d.startswith("daccore")}
            assert not wrong, f"{name} imports {wrong}"
    assert daccore.__version__


def test_every_module_imports():
    # run on the installed wheel by make test: a subpackage or module left out fails here first
    import importlib

    found = modules()
    for name in sorted(found):
        importlib.import_module(name)
    assert {
        "daccore.backends.base",
        "daccore.etcd.types",
        "daccore.share",
        "dacd.copier",
        "dacctl.slurm_files",
        "daclocal.cluster",
    } <= set(found)
