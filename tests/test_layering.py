"""Layering: which flopwatch package may import which (the table of docs/architecture.md), and no cycles.

Walks every source file's imports with ``ast`` — module-level, inside functions and under ``TYPE_CHECKING``,
``import``, ``from … import`` and ``importlib.import_module("flopwatch…")`` — so a lazy import cannot hide a
dependency. Cycles are checked between packages and between the modules of every package.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "flopwatch"

BASE = {"__init__", "errors", "units", "devices", "text", "io", "sensor_timing", "published"}
#: unit (a top-level module or package of flopwatch) → the units it may import. Keep docs/architecture.md in step.
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "text": set(),  # literal printing of user strings (CLI console and daemon logs)
    "__init__": {"errors"},
    "units": {"errors"},
    "devices": {"__init__", "errors", "units"},
    "sensor_timing": {"__init__", "errors", "units", "devices"},  # each sensor's window and update period
    "io": {"errors"},  # safe input / atomic output (flopwatch.io): a foundation like errors
    "published": {"errors", "io", "units"},  # sha256 of the published study data (issue 25)
    "records": BASE,
    "telemetry": BASE,
    "detect": BASE | {"telemetry"},
    "workloads": BASE | {"records"},
    "estimate": BASE | {"records"},
    "evaluate": BASE | {"records", "estimate"},
    "powermodel": BASE | {"telemetry", "workloads"},
    "sim": BASE | {"records", "telemetry", "workloads", "powermodel"},
    "join": BASE | {"records", "telemetry", "detect"},
    "backends": BASE | {"telemetry", "sim"},
    # fleet scale (issue 12): Prometheus history through telemetry's client, estimate's bounds, the built-in power model
    "fleet": BASE | {"telemetry", "estimate", "powermodel"},
    "report": BASE | {"records", "telemetry", "detect", "estimate", "evaluate", "powermodel"},
    "monitor": BASE
    | {"records", "telemetry", "detect", "join", "workloads", "estimate", "evaluate", "backends"},
    "pipeline": BASE
    | {"records", "telemetry", "detect", "join", "workloads", "estimate", "evaluate", "powermodel", "sim"}
    | {"backends", "report"},
    # red-team suites attack real records and simulated twins: a composition level like pipeline
    "redteam": BASE | {"records", "telemetry", "detect", "join", "workloads", "estimate", "evaluate", "sim"},
    "cli": {"*"},  # the outermost composition root: may import anything
    "__main__": {"cli"},
}
#: Stated outright by the architecture: these never reach the simulator, by any route.
NEVER_SIM = (
    "telemetry",
    "estimate",
    "powermodel",
    "detect",
    "records",
    "workloads",
    "evaluate",
    "join",
    "report",
    "fleet",
)


def _unit(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "flopwatch":
        return None
    if len(parts) == 1 or parts[1] == "__version__":
        return "__init__"
    return parts[1]


def _own_unit(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0].removesuffix(".py") if rel.parts[0] != "__init__.py" else "__init__"


def imports_of(path: Path) -> set[str]:
    """Every flopwatch module ``path`` imports (any scope), including importlib.import_module string literals."""
    out: set[str] = set()
    for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(n, ast.Import):
            out |= {a.name for a in n.names}
        elif isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
            out.add(n.module)
            if n.module == "flopwatch":
                out |= {f"flopwatch.{a.name}" for a in n.names}
        elif isinstance(n, ast.ImportFrom) and n.level > 0:
            raise AssertionError(f"{path}: relative import (use absolute flopwatch.… imports)")
        elif (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute | ast.Name)
            and getattr(n.func, "attr", getattr(n.func, "id", "")) == "import_module"
            and n.args
            and isinstance(n.args[0], ast.Constant)
            and isinstance(n.args[0].value, str)
        ):
            out.add(n.args[0].value)
    return {m for m in out if m.split(".")[0] == "flopwatch"}


def unit_graph() -> dict[str, set[str]]:
    g: dict[str, set[str]] = {}
    for f in SRC.rglob("*.py"):
        u = _own_unit(f)
        deps = {v for m in imports_of(f) if (v := _unit(m)) is not None and v != u}
        g.setdefault(u, set()).update(deps)
    return g


def test_every_unit_is_in_the_table() -> None:
    assert set(unit_graph()) <= set(ALLOWED), set(unit_graph()) - set(ALLOWED)


def test_imports_follow_the_allowed_table() -> None:
    bad = []
    for u, deps in unit_graph().items():
        allowed = ALLOWED[u]
        if "*" in allowed:
            continue
        bad += [f"{u} -> {d}" for d in sorted(deps - allowed)]
    assert not bad, "imports outside docs/architecture.md's table: " + ", ".join(bad)


def test_nothing_below_the_composition_roots_reaches_the_simulator() -> None:
    g = unit_graph()
    for u in NEVER_SIM:
        seen, todo = set(), [u]
        while todo:
            x = todo.pop()
            for d in g.get(x, ()):
                if d not in seen:
                    seen.add(d)
                    todo.append(d)
        assert "sim" not in seen, f"{u} reaches flopwatch.sim"


def test_no_package_cycles() -> None:
    g = unit_graph()
    state: dict[str, int] = {}

    def visit(u: str, path: list[str]) -> None:
        state[u] = 1
        for d in sorted(g.get(u, ())):
            if state.get(d) == 1:
                raise AssertionError("import cycle: " + " -> ".join([*path, u, d]))
            if d not in state:
                visit(d, [*path, u])
        state[u] = 2

    for u in sorted(g):
        if u not in state:
            visit(u, [])


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_graph() -> dict[str, set[str]]:
    """flopwatch module → the flopwatch modules it imports (any scope). ``from pkg import sub`` counts as an
    import of the module ``pkg.sub`` when there is one; a package's ``__init__`` is not counted as imported by
    its own submodules (Python runs it first, whatever they import)."""
    files = {_module_name(f): f for f in SRC.rglob("*.py")}
    g: dict[str, set[str]] = {}
    for m, f in files.items():
        deps: set[str] = set()
        for n in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(n, ast.Import):
                names = [a.name for a in n.names]
            elif isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
                subs = [f"{n.module}.{a.name}" for a in n.names if f"{n.module}.{a.name}" in files]
                names = subs if len(subs) == len(n.names) else [n.module, *subs]
            if (
                isinstance(n, ast.Call)
                and getattr(n.func, "attr", getattr(n.func, "id", "")) == "import_module"
                and n.args
                and isinstance(n.args[0], ast.Constant)
                and isinstance(n.args[0].value, str)
            ):
                names = [n.args[0].value]
            for name in names:
                if name.split(".")[0] != "flopwatch":
                    continue
                while name and name not in files:  # a name inside a module: the module
                    name = name.rpartition(".")[0]
                if name and name != m:
                    deps.add(name)
        g[m] = deps
    return g


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan, iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(g):
        if root in index:
            continue
        work = [(root, iter(sorted(g.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(g.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


#: Module cycles another open issue removes (each named with it). Empty this when it lands: the test then holds
#: the line at zero.
PENDING_CYCLES: dict[frozenset[str], str] = {}


def test_no_module_cycles() -> None:
    """No import circle between any two modules (telemetry's schema → … → trace stack included)."""
    found = [c for c in cycles(module_graph()) if frozenset(c) not in PENDING_CYCLES]
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_cycle_finder_finds_lazy_and_type_checking_cycles(tmp_path: Path) -> None:
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert cycles(g) == [["a", "b", "c"]]
    assert cycles({"x": {"y"}, "y": set()}) == []
    f = tmp_path / "m.py"
    f.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from flopwatch.telemetry.trace import Trace\n"
    )
    assert imports_of(f) == {"flopwatch.telemetry.trace"}


def test_telemetry_is_a_stack() -> None:
    """The review's sketch: the schema at the bottom imports nothing of telemetry; the writer only the schema;
    the trace sits on the source and the integrator, and nothing below imports it."""
    g = module_graph()
    tel = {m: {d for d in deps if d.startswith("flopwatch.telemetry")} for m, deps in g.items()}
    assert tel["flopwatch.telemetry.schema"] == set()
    assert tel["flopwatch.telemetry.writer"] == {"flopwatch.telemetry.schema"}
    below = ("schema", "seed_format", "plausibility", "source", "integrate", "writer", "sensors.base")
    for m in below:
        assert "flopwatch.telemetry.trace" not in tel[f"flopwatch.telemetry.{m}"], m


def test_the_walker_sees_lazy_and_importlib_imports(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text(
        "import importlib\n"
        "def f():\n    from flopwatch.sim.sensor import from_spec\n"
        "def g():\n    return importlib.import_module('flopwatch.sim.accelerator')\n"
    )
    assert imports_of(f) == {"flopwatch.sim.sensor", "flopwatch.sim.accelerator"}
