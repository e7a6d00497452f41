"""README's guarantees table says what each profile really allows."""

from __future__ import annotations

from pathlib import Path

from logquake.checker.options import QUEUE_TYPES
from logquake.guarantees import ALWAYS_ALLOWED, GUARANTEES, WW_DEPS_ALLOW, allowed_types

README = Path(__file__).resolve().parents[2] / "README.md"


def _table() -> dict[str, set[str]]:
    rows = {}
    for line in README.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0] in GUARANTEES:
            rows[cells[0]] = set() if cells[3] == "nothing" else {t.strip() for t in cells[3].split(",")}
    return rows


def test_the_table_lists_each_profiles_own_allowance():
    table = _table()
    assert set(table) == set(GUARANTEES)
    for name, g in GUARANTEES.items():
        assert table[name] == set(g.allowed - ALWAYS_ALLOWED), name


def test_the_text_names_what_a_default_exactly_once_run_tolerates():
    allowed = allowed_types(reported=QUEUE_TYPES, guarantee="exactly-once")
    assert allowed == ALWAYS_ALLOWED | WW_DEPS_ALLOW  # G1c among them, as the README says
    text = " ".join(README.read_text().split())
    assert "So a default exactly-once run tolerates int-send-skip, G0* and G1c*." in text
