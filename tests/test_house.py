"""The package's shape, kept: small modules, imports that only go down the layers, no loops.

The layers are those of docs/architecture.md, bottom first; a package may import its own
layer's packages and any below, never one above. Every import counts, those inside functions
too (an import deferred for start-up time is still a dependency)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "scaletrain"

#: Bottom first. The top-level modules count as packages of their own.
LAYERS = [
    ["foundation", "version"],
    ["process", "memory", "hardware", "flops", "data", "track"],
    ["parallel"],
    ["strategies", "workloads", "checkpoint", "fault", "launchers"],
    ["run", "api"],
    ["measure", "comm", "doctor"],
    ["train", "compare"],
    ["plan"],
    ["bench"],
    ["cli", "__main__", "__init__"],
]

#: A module longer than this needs a reason written in it ("Longer than 350 lines because …").
LONG = 350
#: No module is longer than this.
LONGEST = 400


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that `name` imports (a name imported from a package that is a
    module of its own counts as that module)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source for a in node.names]
        else:
            continue
        found.update(t for t in targets if t in modules and t != name)
    return found


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_module_is_small_and_a_long_one_says_why():
    too_long, unexplained = [], []
    for name, path in _modules().items():
        text = path.read_text()
        lines = text.count("\n")
        if lines > LONGEST:
            too_long.append(f"{name} ({lines} lines)")
        elif lines > LONG and "Longer than 350 lines because" not in text:
            unexplained.append(f"{name} ({lines} lines)")
    assert not too_long, f"modules over {LONGEST} lines: give their second purposes modules of their own: {too_long}"
    assert not unexplained, f"modules over {LONG} lines without a reason written in them: {unexplained}"


def test_imports_only_go_down_the_layers():
    modules = _modules()
    layer = {package: i for i, packages in enumerate(LAYERS) for package in packages}
    units = {_unit(m) for m in modules}
    assert units <= set(layer), f"packages in no layer (add them to LAYERS and docs/architecture.md): {units - set(layer)}"
    upward = []
    for name, path in modules.items():
        for target in _imports(name, path, modules):
            if layer[_unit(target)] > layer[_unit(name)]:
                upward.append(f"{name} -> {target}")
    assert not upward, f"imports up the layers: {sorted(upward)}"


def test_no_import_loops():
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    loops, state, stack = [], defaultdict(int), []  # 0 unseen, 1 on the stack, 2 done

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state[nxt] == 1:
                loops.append(" -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif state[nxt] == 0:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if state[node] == 0:
            visit(node)
    assert not loops, f"import loops: {loops[:5]}"
