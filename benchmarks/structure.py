"""Structure of ``src/fedsparse``: import cycles and long modules.

Usage: ``python benchmarks/structure.py [--max-lines 400]``

Prints every strongly connected component of the import graph (a set of modules that
import each other, directly or through others), once counting only the imports a module
runs when it is loaded and once counting imports inside functions too (those defer a
cycle to call time but still tie the modules together), then every module longer than
``--max-lines``. Exit status 0; it reports, it does not judge.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

PACKAGE = "fedsparse"
ROOT = Path(__file__).resolve().parents[1] / "src" / PACKAGE


def module_name(path: Path) -> str:
    """``src/fedsparse/a/b.py`` -> ``fedsparse.a.b`` (a package's ``__init__`` is the package)."""
    parts = (PACKAGE, *path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(current: str, is_package: bool, node: ast.ImportFrom) -> list[str]:
    """The fedsparse modules an ``from X import a, b`` names (a name may be a module)."""
    if node.level:
        base = current.split(".") if is_package else current.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        target = ".".join([*base, node.module] if node.module else base)
    else:
        target = node.module or ""
    return [target, *(f"{target}.{alias.name}" for alias in node.names)]


def imports(path: Path, *, top_level_only: bool) -> set[str]:
    """The fedsparse modules ``path`` imports (at load time only, or anywhere)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    name, is_package = module_name(path), path.name == "__init__.py"
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.update(_resolve(name, is_package, node))
    return {m for m in found if m.split(".")[0] == PACKAGE}


def graph(top_level_only: bool) -> dict[str, set[str]]:
    """Module -> the fedsparse modules it imports (names that are not modules dropped)."""
    files = {module_name(p): p for p in ROOT.rglob("*.py")}
    return {name: {m for m in imports(path, top_level_only=top_level_only)
                   if m in files and m != name}
            for name, path in files.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm).

    A package's ``__init__`` importing its own submodules is not counted: that is how a
    package exposes its API, and the submodule importing the package back is what would
    make it a cycle — kept.
    """
    edges = {a: {b for b in bs if not b.startswith(a + ".")} for a, bs in edges.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    sys.setrecursionlimit(10_000)

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(found)


def long_modules(max_lines: int) -> list[tuple[int, str]]:
    """(lines, module) for each module longer than ``max_lines``, longest first."""
    sizes = [(len(p.read_text().splitlines()), module_name(p)) for p in ROOT.rglob("*.py")]
    return sorted((s for s in sizes if s[0] > max_lines), reverse=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-lines", type=int, default=400)
    args = parser.parse_args(argv)
    for label, top in (("at load time", True), ("counting imports inside functions", False)):
        found = cycles(graph(top))
        print(f"import cycles {label}: {len(found)}")
        for component in found:
            print("  " + " <-> ".join(component))
    big = long_modules(args.max_lines)
    print(f"modules over {args.max_lines} lines: {len(big)}")
    for lines, name in big:
        print(f"  {lines:5d}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
