"""The package's modules import each other without a cycle: a module depends on the ones it imports, never on one that
imports it back. Imports inside functions count too (a cycle hidden in a function is still a cycle: it only waits for
the call), and so do the packages an import runs on the way (``vllm_repo.estimate.gpus`` runs estimate/__init__.py);
those under ``if TYPE_CHECKING:`` don't, as they never run."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def modules(root: Path = ROOT) -> dict[str, tuple[Path, bool]]:
    """Every module of vllm_repo by dotted name, with its file and whether it is a package's __init__."""
    found = {}
    for path in (root / "vllm_repo").rglob("*.py"):
        parts = list(path.relative_to(root).with_suffix("").parts)
        package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if package else parts)] = (path, package)
    return found


def _runs(tree: ast.AST) -> list[ast.AST]:
    """The nodes of ``tree`` outside ``if TYPE_CHECKING:`` blocks."""
    hidden: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name | ast.Attribute):
            name = node.test.id if isinstance(node.test, ast.Name) else node.test.attr
            if name == "TYPE_CHECKING":
                hidden.update(id(n) for n in ast.walk(node))
    return [n for n in ast.walk(tree) if id(n) not in hidden]


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """module -> the modules of vllm_repo it imports (the most specific module each import names)."""
    mods = modules(root)

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, (path, package) in mods.items():
        here = name if package else name.rpartition(".")[0]
        targets: list[str] = []
        for node in _runs(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets.extend(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")[: len(here.split(".")) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                # `from package import submodule` imports the submodule; `from module import name`, the module.
                targets.extend(f"{source}.{a.name}" if f"{source}.{a.name}" in mods else source for a in node.names)
        imported = {t for t in map(resolve, (t for t in targets if t.startswith("vllm_repo"))) if t and t != name}
        # Importing a.b.c runs a/__init__.py and a/b/__init__.py first, unless the importer is inside them (then they
        # are already under way).
        for target in list(imported):
            parts = target.split(".")
            imported.update(
                ancestor
                for ancestor in (".".join(parts[:i]) for i in range(1, len(parts)))
                if not (name == ancestor or name.startswith(ancestor + "."))
            )
        graph[name] = imported
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_the_package_has_no_import_cycle():
    graph = import_graph()
    found = cycles(graph)
    assert not found, "import cycles (module -> what it imports within the cycle):\n" + "\n\n".join(
        "\n".join(f"  {m} -> {', '.join(sorted(graph[m] & set(cycle)))}" for m in cycle) for cycle in found
    )


def test_the_check_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_the_graph_sees_imports_in_functions_and_not_for_type_checking(tmp_path):
    package = tmp_path / "vllm_repo"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from . import leaf\n")
    (package / "sub" / "leaf.py").write_text("def f():\n    from vllm_repo.other import x\n")
    (package / "other.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from vllm_repo.sub.leaf import f\n"
    )
    (package / "third.py").write_text("import vllm_repo.sub.leaf\n")
    assert import_graph(tmp_path) == {
        "vllm_repo": set(),
        "vllm_repo.sub": {"vllm_repo.sub.leaf"},
        "vllm_repo.sub.leaf": {"vllm_repo.other"},
        "vllm_repo.other": set(),
        "vllm_repo.third": {"vllm_repo.sub", "vllm_repo.sub.leaf"},
    }
