"""Old ledgers still verify: the signed payload bytes did not change when ``canonical_payload`` moved onto the
one JSON-safe converter (``io.jsonable``). The fixture was written by the previous code (``ledger_cases.py``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from flopwatch.cli import main
from flopwatch.monitor.ledger import read_entries, verify_ledger
from flopwatch.monitor.ledger_format import canonical_payload
from ledger_cases import OLD_LEDGER, ROWS
from monitor_helpers import private_tmp  # noqa: F401 - autouse: temporary files under tmp_path


@pytest.fixture
def old_ledger(tmp_path: Path) -> Path:
    dst = tmp_path / OLD_LEDGER.name
    shutil.copy(OLD_LEDGER, dst)
    shutil.copy(f"{OLD_LEDGER}.pub", f"{dst}.pub")
    return dst


def test_a_ledger_written_before_the_change_verifies(old_ledger: Path) -> None:
    res = verify_ledger(old_ledger, f"{old_ledger}.pub")
    assert res.ok, res.problems
    assert res.n_rows == 1 + len(ROWS) and res.key_source


def test_canonical_payload_remakes_the_stored_bytes(old_ledger: Path) -> None:
    genesis, *rows = read_entries(old_ledger)
    assert genesis.kind == "genesis" and len(rows) == len(ROWS)
    for entry, (kind, payload) in zip(rows, ROWS, strict=True):
        assert entry.kind == kind
        assert canonical_payload(payload) == entry.payload_text  # byte for byte, so hash and signature hold
    text = rows[1].payload_text
    # what the canonical options guarantee, spelled out: nulls for non-finite, ASCII, sorted, compact
    assert '"nan":null' in text and '"np_f32":0.10000000149011612' in text and "\\u6e29" in text
    assert text.isascii() and ", " not in text and '"keys":{"1":"int","2.5":"float","None":"none"}' in text


def test_canonical_payload_is_strict_and_independent_of_container_types() -> None:
    a = canonical_payload({"b": (1, np.float32(2.0)), "a": [np.int64(3)]})
    assert a == canonical_payload({"a": (3,), "b": [1, 2.0]}) == '{"a":[3],"b":[1,2.0]}'


def test_cli_verifies_the_old_ledger(old_ledger: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ledger", "verify", str(old_ledger)]) == 0
    assert "ok" in capsys.readouterr().out.lower()
