"""Guards for issue 24 item 3 ("one of each thing"): the private copies of the finite-number check and of the
name → spec resolver that were folded into ``units.finite`` and ``devices.resolve`` do not come back.

The scans read the source with ``ast``. What is still allowed is listed with its reason. A module that drops
its copy should leave the list too; that is not asserted, so that folding one never breaks this test.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "flopwatch"

# private finite checks not yet folded: estimate/ and fleet/ were other engineers' packages on 2026-12-01
PENDING_FINITE = {
    ("fleet/groups.py", "_fin"),
}
# try: get_device(...) except ...: lookups that are not the plain resolver, or not yet folded
OTHER_LOOKUPS = {
    "devices.py",  # resolve itself
    "powermodel/bench.py",  # the first name whose spec supports the dtype, not the first known name
    "sim/sensor.py",  # parses sim:KEYxN; an unknown device there is the user's error, raised
    "estimate/calibration.py",  # pending (estimate/ was another engineer's package on 2026-12-01)
    "estimate/sound.py",  # pending, as above
    "fleet/groups.py",  # pending (fleet/ was being rewritten on 2026-12-01)
    "fleet/reader.py",  # pending, as above
}


@functools.cache
def _modules(needle: str) -> tuple[tuple[str, ast.Module], ...]:
    """The parsed modules whose text contains ``needle`` (parsing all of them costs seconds)."""
    texts = ((p.relative_to(SRC).as_posix(), p.read_text()) for p in sorted(SRC.rglob("*.py")))
    return tuple((rel, ast.parse(text)) for rel, text in texts if needle in text)


def _is_finite_helper(fn: ast.FunctionDef) -> bool:
    """``def f(x) -> float | None`` (or ``-> bool``) of at most three statements calling ``isfinite(x)``."""
    if len(fn.args.args) != 1 or fn.returns is None or len(fn.body) > 3:
        return False
    if ast.unparse(fn.returns) not in ("float | None", "bool", "Optional[float]"):
        return False
    arg = fn.args.args[0].arg
    return any(
        isinstance(n, ast.Call)
        and ast.unparse(n.func).endswith("isfinite")
        and [ast.unparse(a) for a in n.args] == [arg]
        for n in ast.walk(fn)
    )


def test_no_private_finite_number_helper_outside_units() -> None:
    found = {
        (rel, fn.name)
        for rel, tree in _modules("isfinite")
        if rel != "units.py"
        for fn in ast.walk(tree)
        if isinstance(fn, ast.FunctionDef) and _is_finite_helper(fn)
    }
    assert found <= PENDING_FINITE, f"use flopwatch.units.finite instead of {sorted(found - PENDING_FINITE)}"


def test_no_private_device_resolver_outside_devices() -> None:
    found = set()
    for rel, tree in _modules("get_device("):
        for node in ast.walk(tree):
            if isinstance(node, ast.Try) and node.handlers:
                body = "\n".join(ast.unparse(s) for s in node.body)
                if "get_device(" in body:
                    found.add(rel)
    assert found <= OTHER_LOOKUPS, f"use flopwatch.devices.resolve in {sorted(found - OTHER_LOOKUPS)}"


def test_one_json_safe_converter() -> None:
    """``io.jsonable`` is the converter; the CLI's ``to_jsonable`` and the ledger's ``_clean`` are gone."""
    names = {"to_jsonable", "jsonable", "_jsonable"}
    found = {
        (rel, fn.name)
        for rel, tree in _modules("jsonable(")
        for fn in ast.walk(tree)
        if isinstance(fn, ast.FunctionDef) and fn.name in names
    }
    assert found == {("io.py", "jsonable")}
    ledger_format = ast.parse((SRC / "monitor" / "ledger_format.py").read_text())
    assert not any(isinstance(f, ast.FunctionDef) and f.name == "_clean" for f in ast.walk(ledger_format))
