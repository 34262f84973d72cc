"""The packages import in one direction: no module reaches, directly or through others, back to
itself. Lazy imports inside functions count (they are still a circle a reader must untangle);
imports only for type checkers do not."""

import ast
from importlib.util import find_spec
from pathlib import Path

import daccore

PACKAGES = ("daccore", "dacctl", "dacd", "dacservice", "daclocal")


def modules() -> dict[str, Path]:
    """Every module of the four packages, from wherever they are installed."""
    found = {}
    for package in PACKAGES:
        spec = find_spec(package)
        assert spec is not None and spec.origin is not None, package
        root = Path(spec.origin).parent
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


#: daccore's layers, lowest first: a module imports its own layer or one below, never above
#: (daccore/__init__.py says what each owns). A module of no listed layer fails the test.
LAYERS = (
    ("daccore.errors", "daccore.units", "daccore.escape", "daccore.gcpause", "daccore.share"),
    ("daccore.records",),
    ("daccore.settings",),
    ("daccore.rules", "daccore.etcd", "daccore.backends"),
    ("daccore.store",),
    ("daccore.services",),
)
#: the processes: each imports daccore, never the reverse, nor another process: dacctl's thin
#: commands start the local DAC (`dacctl local`) lazily; daclocal, the all-in-one site, drives
#: any of them. The answerer answers Slurm's hooks with the core's code of `dacctl --function`
#: (daccore/services/slurm_answer.py), and the user service starts by its own entry point
#: (dac-user-service)
PROCESSES = {
    "dacctl": {"daclocal"},
    "dacd": set(),
    "dacservice": set(),
    "daclocal": {"dacctl", "dacd", "dacservice"},
}


def layer_of(module: str) -> int:
    for rank, prefixes in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return rank
    if module == "daccore":
        return 0
    raise AssertionError(f"{module} is in no layer: add it to LAYERS and daccore/__init__.py")


def wrong_directions(graph: dict[str, set[str]]) -> list[str]:
    wrong = []
    for name, deps in sorted(graph.items()):
        top = name.split(".")[0]
        for dep in sorted(deps):
            dep_top = dep.split(".")[0]
            if top == "daccore" and dep_top == "daccore":
                if layer_of(dep) > layer_of(name):
                    wrong.append(f"{name} imports {dep}, a layer above it")
            elif dep_top not in (top, "daccore") and dep_top not in PROCESSES[top]:
                wrong.append(f"{name} imports {dep}, another process")
    return wrong


def test_daccore_imports_only_downward_and_each_process_only_daccore():
    found = modules()
    graph = {name: imports_of(path, set(found)) - {name} for name, path in found.items()}
    assert {layer_of(name) for name in graph if name.startswith("daccore")} == set(
        range(len(LAYERS))
    )
    assert wrong_directions(graph) == []


def test_the_direction_check_finds_an_upward_import():
    graph = {
        "daccore.records.models": {"daccore.store"},
        "dacd.main": {"dacctl.cli"},
        "daccore.services.jobs": {"daccore.records.models"},
        "dacctl.cli": {"dacservice.users", "daclocal.cluster"},
        "dacctl.render": {"dacservice.users"},
    }
    assert wrong_directions(graph) == [
        "daccore.records.models imports daccore.store, a layer above it",
        "dacctl.cli imports dacservice.users, another process",
        "dacctl.render imports dacservice.users, another process",
        "dacd.main imports dacctl.cli, another process",
    ]


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
        "dacd.staging.copier",
        "dacctl.slurm_files",
        "daclocal.cluster",
    } <= set(found)
