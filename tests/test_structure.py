"""The package's shape: no import runs upward, no import circle, nothing private crosses a package, no
function longer than a screen.

Read from the source with `ast`, lazy (function-level) imports included, so a failure names the file and
the line. The layers' order, bottom to top, is the one docs/architecture.md draws.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "r2s2r"
MAX_FUNCTION_LINES = 60
LAYERS = (
    "errors",
    "files",
    "robots",
    "policies",
    "data",
    "model",
    "rollout",
    "training",
    "eval",
    "rl",
    "scripts",
)


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer(module: str) -> str | None:
    """The layer of `r2s2r.<layer>...`; None for the package root."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def imports(path: Path) -> list[tuple[str, list[str], int]]:
    """(module imported, names taken from it, line) for every r2s2r import in `path`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("r2s2r"):
            found.append((node.module, [a.name for a in node.names], node.lineno))
        elif isinstance(node, ast.Import):
            found += [(a.name, [], node.lineno) for a in node.names if a.name.startswith("r2s2r")]
    return found


def graph() -> dict[str, list[tuple[str, list[str], int]]]:
    return {module_name(p): imports(p) for p in sorted(SRC.rglob("*.py"))}


def test_every_package_has_a_layer():
    packages = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    modules = {p.stem for p in SRC.glob("*.py") if p.stem != "__init__"}
    assert packages | modules == set(LAYERS), "add the new package to LAYERS and docs/architecture.md"


def test_no_import_runs_upward():
    upward = []
    for module, deps in graph().items():
        here = layer(module)
        for target, _, line in deps:
            there = layer(target)
            if here is None or there is None or here == there:
                continue
            if LAYERS.index(there) > LAYERS.index(here):
                upward.append(f"{module}:{line} imports {target} ({here} sits below {there})")
    assert not upward, "\n".join(upward)


def test_nothing_private_crosses_a_package():
    private = [
        f"{module}:{line} takes {name} from {target}"
        for module, deps in graph().items()
        for target, names, line in deps
        for name in names
        if name.startswith("_") and layer(target) != layer(module)
    ]
    assert not private, "\n".join(private)


def test_no_import_circle():
    edges = {m: {t for t, names, _ in deps} for m, deps in graph().items()}
    for module, deps in graph().items():  # `from r2s2r.x import y` may name the submodule r2s2r.x.y
        for target, names, _ in deps:
            edges[module] |= {f"{target}.{n}" for n in names if f"{target}.{n}" in edges}
    state: dict[str, int] = {}  # 1 on the current path, 2 done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if nxt not in edges:
                continue
            if state.get(nxt) == 1:
                return [*path, node, nxt]
            if nxt not in state and (cycle := visit(nxt, [*path, node])):
                return cycle
        state[node] = 2
        return None

    for start in sorted(edges):
        if start not in state and (cycle := visit(start, [])):
            pytest.fail("import circle: " + " -> ".join(cycle[cycle.index(cycle[-1]) :]))


def test_the_checks_see_an_upward_import(tmp_path):
    """The reader finds a lazy import inside a function, the kind an upward import hides in."""
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from r2s2r.rl.train import _x\n")
    assert imports(source) == [("r2s2r.rl.train", ["_x"], 2)]


def long_functions(path: Path) -> list[str]:
    """`path:line name (n lines)` for every function or method longer than MAX_FUNCTION_LINES."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines = node.end_lineno - node.lineno + 1
            if lines > MAX_FUNCTION_LINES:
                found.append(f"{path}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_is_longer_than_a_screen():
    too_long = [f for p in sorted(SRC.rglob("*.py")) for f in long_functions(p)]
    assert not too_long, "split these into the steps their docstrings list:\n" + "\n".join(too_long)


def test_the_length_check_counts_a_long_function(tmp_path):
    source = tmp_path / "m.py"
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    source.write_text(f"def short():\n    pass\n\n\ndef long():\n{body}\n")
    assert long_functions(source) == [f"{source}:5 long ({MAX_FUNCTION_LINES + 1} lines)"]
