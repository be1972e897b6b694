"""docs/fidelity.md's task table, checked against the scenario files: the doc says what is true of the twin now.

Each ✔ under Fix is backed by the published golden's repair actions (tests/arena/fixtures/golden_repairs.yaml,
facts read from the real solve.sh, cited by the row) appearing in that task's reference solution; a Grade ✔ is
impossible where the scenario's own matrix records a real verdict the twin does not reproduce.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
import yaml

from arena.scenario import list_scenarios

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "fidelity.md"
GOLDEN = Path(__file__).resolve().parent / "fixtures" / "golden_repairs.yaml"
COLUMNS = ("Id", "Fault", "Fix", "Grade", "Load")
MARKS = ("✔", "◐", "✘")


def rows() -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for line in DOC.read_text().splitlines():
        if not line.startswith("| ia-"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        assert len(cells) == 9, line
        task, real, *marks, sources, why = cells
        out[task] = {"real": real, **dict(zip(COLUMNS, marks)), "sources": sources, "why": why}
    return out


ROWS = rows()
SCENARIOS = {sc.id: sc for sc in list_scenarios()}


def _flat(text: str) -> str:
    return " ".join(text.split()).lower()


def test_one_row_per_scenario_with_a_mark_in_every_column():
    assert sorted(ROWS) == sorted(SCENARIOS)
    for task, row in ROWS.items():
        for col in COLUMNS:
            assert row[col] in MARKS, (task, col, row[col])


def test_every_row_cites_real_source_paths_and_explains_every_partial_or_differing_column():
    for task, row in ROWS.items():
        sources = [s.strip() for s in row["sources"].split(";") if s.strip()]
        assert sources and all(re.fullmatch(r"(IA|SW) \S+", s) for s in sources), (task, row["sources"])
        for col in COLUMNS:
            if row[col] != "✔":
                assert f"{col}:" in row["why"], f"{task}: {col} is {row[col]} with no '{col}:' explanation"


def test_a_fix_tick_means_the_reference_carries_the_published_goldens_repairs():
    golden = yaml.safe_load(GOLDEN.read_text())
    ticked = {t for t, r in ROWS.items() if r["Fix"] == "✔"}
    assert ticked == set(golden), "a Fix ✔ needs a golden entry, and a golden entry a Fix ✔"
    for task in sorted(ticked):
        entry = golden[task]
        assert entry["source"].endswith("solve.sh") and entry["source"] in ROWS[task]["sources"], task
        ref = _flat(" ".join(s.run or "" for s in SCENARIOS[task].solutions["reference"].script))
        missing = [r for r in entry["repairs"] if _flat(r) not in ref]
        assert not missing, f"{task}: the reference lacks the golden's {missing}"


def test_a_grade_tick_is_impossible_where_the_twin_misses_a_real_matrix_verdict():
    for task, sc in SCENARIOS.items():
        misses = [name for name, m in sc.grader.matrix.items()
                  if m.real is not None and (m.real.outcome, m.real.safety) != (m.outcome, m.safety)]
        if misses:
            assert ROWS[task]["Grade"] != "✔", f"{task}: {misses} differ from the real matrix"
            assert all(n in ROWS[task]["why"] for n in misses), f"{task}: name {misses} in the explanation"


@pytest.mark.parametrize("column", COLUMNS)
def test_the_counts_line_matches_the_table(column):
    counts = Counter(r[column] for r in ROWS.values())
    line = next(ln for ln in DOC.read_text().splitlines() if ln.startswith("**Counts.**"))
    part = re.search(rf"{column} ([^.]*)\.", line)
    assert part, (column, line)
    stated = {m: int(n) for m, n in re.findall(r"([✔◐✘]) (\d+)", part.group(1))}
    assert stated == dict(counts), (column, stated, dict(counts))
