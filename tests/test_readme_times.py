"""README's "Expected run times" quotes benchmarks/README.md: every figure, with its machine and date (issue 34).

The table went stale once (a GRPO step "with short completions", a retired DAG of stage commands) because
nothing tied it to the measurements. Here every number with a unit in a row must appear, with that unit, in
benchmarks/README.md; whitespace is normalised on both sides, so rewrapping either file changes nothing.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HEADING = "## Expected run times"
NUMBER = r"\d[\d,]*(?:\.\d+)?"
# "8 min 58 s" is one figure; so is a range such as "20.5-20.7 min". The look-arounds keep "6 min 40 s"
# from matching inside "16 min 40 s" and "5 s" inside "1.5 s".
FIGURE = re.compile(rf"(?<![\d.,])(?:\d+ min \d+ s|{NUMBER}(?:-{NUMBER})? (?:h|min|s|GiB|MiB))(?![\w.])")
MACHINE = re.compile(r"\b(?:H100|H200|A100|\d+-core|\d+ CPU cores)\b")
GPU = re.compile(r"\b(?:H100|H200|A100)")
# a GPU figure holds for the vLLM and torch it ran on: the lent image's, or the `gpu` extra's (benchmarks/README.md)
STACK = re.compile(r"\bvLLM \d+\.\d+ / torch \d+\.\d+\b")
DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
RETIRED = ("short completions", "stage command")


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _section() -> list[str]:
    lines = (REPO / "README.md").read_text().splitlines()
    start = lines.index(HEADING) + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("## ")), len(lines))
    return lines[start:end]


def _table() -> list[dict[str, str]]:
    """The table's rows as {column: cell}, whitespace normalised."""
    rows = [[_flat(cell) for cell in line.strip().strip("|").split("|")] for line in _section() if line.startswith("|")]
    header, body = rows[0], rows[2:]  # rows[1] is the |---| line
    return [dict(zip(header, row, strict=True)) for row in body]


def _source_note() -> str:
    """The paragraph under the table, which names the sections of benchmarks/README.md."""
    lines = _section()
    after = max(i for i, line in enumerate(lines) if line.startswith("|")) + 1
    paragraph = []
    for line in lines[after:]:
        if paragraph and not line.strip():
            break
        paragraph.append(line)
    return _flat(" ".join(paragraph))


def _benchmarks() -> str:
    return _flat((REPO / "benchmarks" / "README.md").read_text())


def _appears(figure: str, text: str) -> bool:
    return re.search(rf"(?<![\d.,]){re.escape(figure)}(?![\d])", text) is not None


ROWS = _table()


def test_the_table_has_rows_with_machine_date_and_time_columns() -> None:
    assert ROWS, f"no table under {HEADING!r} in README.md"
    assert {"run", "machine", "stack", "date", "time"} <= set(ROWS[0]), ROWS[0].keys()


@pytest.mark.parametrize("row", ROWS, ids=[row["run"][:40] for row in ROWS])
def test_each_row_names_its_machine_and_a_measured_date(row: dict[str, str]) -> None:
    assert MACHINE.search(row["machine"]), f"no machine (GPU model or CPU cores) in {row['machine']!r}"
    assert DATE.fullmatch(row["date"]), f"date {row['date']!r} is not YYYY-MM-DD"
    assert row["date"] in _benchmarks(), f"no measurement of {row['date']} in benchmarks/README.md"


@pytest.mark.parametrize("row", ROWS, ids=[row["run"][:40] for row in ROWS])
def test_each_gpu_row_names_its_software_stack(row: dict[str, str]) -> None:
    if GPU.search(row["machine"]):
        assert STACK.search(row["stack"]), f"{row['run']!r}: no 'vLLM X.Y / torch X.Y' in {row['stack']!r}"
        assert row["stack"].split(" (")[0] in _benchmarks(), f"{row['stack']!r} is not named in benchmarks/README.md"


@pytest.mark.parametrize("row", ROWS, ids=[row["run"][:40] for row in ROWS])
def test_every_figure_of_a_row_is_in_benchmarks(row: dict[str, str]) -> None:
    cells = " | ".join(value for column, value in row.items() if column != "date")
    figures = FIGURE.findall(cells)
    assert FIGURE.findall(row["time"]), f"no figure with a unit in the time {row['time']!r}"
    missing = [figure for figure in figures if not _appears(figure, _benchmarks())]
    assert not missing, f"{row['run']!r}: {missing} not in benchmarks/README.md"
    retired = [phrase for phrase in RETIRED if phrase in cells.lower()]
    assert not retired, f"{row['run']!r} quotes a retired measurement: {retired}"


def test_the_note_under_the_table_names_sections_of_benchmarks() -> None:
    note = _source_note()
    assert "benchmarks/README.md" in note, note
    sections = re.findall(r'"([^"]+)"', note)
    assert sections, f"the note under the table names no section: {note!r}"
    headings = {
        _flat(line.lstrip("#"))
        for line in (REPO / "benchmarks" / "README.md").read_text().splitlines()
        if line.startswith("#")
    }
    assert not set(sections) - headings, f"not headings of benchmarks/README.md: {set(sections) - headings}"


def test_figures_are_matched_whole() -> None:
    assert FIGURE.findall("8 min 58 s; 16.9 s, 20.5-20.7 min, 70.7 GiB, 1,595-token") == [
        "8 min 58 s",
        "16.9 s",
        "20.5-20.7 min",
        "70.7 GiB",
    ]
    assert not _appears("6 min 40 s", "took 16 min 40 s") and not _appears("5 s", "took 1.5 s")
