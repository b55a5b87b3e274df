"""benchmarks/README.md opens with one page of current figures; each row quotes the dated section it links to.

The file is a lab notebook: several dated sections answer the same question, and the latest wins. Its front page
("Current figures") gives today's figure per area with its machine, software stack and date, and links the section
it comes from. Here every link must reach a heading of the record below the front page, and every figure with a
unit in a row must appear in that section: verbatim (whitespace normalised), or as a number in a table column (or
row) whose label names the unit, such as 1007 under "run (s)". The GPU rows name the stack the section ran on.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks" / "README.md"
FRONT_PAGE = "## Current figures"
RECORD = "## The record"
MAX_LINES = 80  # the title and intro to the record's heading: one screen or two

NUMBER = r"\d[\d,]*(?:\.\d+)?"
RANGE = rf"{NUMBER}(?:-{NUMBER})?"
UNITS = r"h|min|s|ms|GiB|MiB|GB|tokens/s|programs/s|predictions/s|points"
# tests/test_readme_times.py's FIGURE, with more units, and ratios and shares ("0.29x", "73.0%") besides
FIGURE = re.compile(rf"(?<![\d.,])(?:\d+ min \d+ s|{RANGE} (?:{UNITS})|{RANGE}(?:x|%))(?![\w.])")
ALIASES = {"s": ("s", "seconds"), "min": ("min", "minutes")}
MACHINE = re.compile(r"\b(?:(?:H100|H200|A100)s?|\d+-core|\d+ CPU cores)\b")
GPU = re.compile(r"\b(?:H100|H200|A100)")
DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
LINK = re.compile(r"\[([^\]]*)\]\(#([^)]*)\)")
IMAGE_STACK = "vLLM 0.26 / torch 2.11"  # the lent machines' image
PINNED_STACK = "vLLM 0.31 / torch 2.13"  # the `gpu` extra: the last section of the file
CPU_STACK = "`cpu` extra"


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _appears(figure: str, text: str) -> bool:
    """FIGURE whole in TEXT: "6.9 s" is not in "16.9 s", "19" not in "190" nor "15" in "15.4" or "15-19"."""
    return re.search(rf"(?<![\d.,])(?<!\d-){re.escape(figure)}(?!\d|[.,-]\d)", text) is not None


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lowercase, punctuation dropped but hyphens and underscores, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lstrip("#").strip().lower()).replace(" ", "-")


def headings(lines: list[str]) -> list[tuple[int, int, str]]:
    """(line index, level, anchor) of every heading outside code fences; repeated anchors get -1, -2 as on GitHub."""
    found, seen, fenced = [], {}, False
    for index, line in enumerate(lines):
        if line.startswith("```"):
            fenced = not fenced
        match = re.match(r"(#{1,6}) ", line)
        if match and not fenced:
            anchor = slug(line)
            count = seen.get(anchor, 0)
            seen[anchor] = count + 1
            found.append((index, len(match.group(1)), f"{anchor}-{count}" if count else anchor))
    return found


def sections(lines: list[str]) -> dict[str, str]:
    """Anchor -> the text of its section: the heading and everything up to the next heading of its level or above."""
    marks = headings(lines)
    texts = {}
    for position, (start, level, anchor) in enumerate(marks):
        end = next((index for index, other, _ in marks[position + 1 :] if other <= level), len(lines))
        texts[anchor] = "\n".join(lines[start:end])
    return texts


def parents(lines: list[str]) -> dict[str, str]:
    """Anchor -> the text of the `##` heading it stands under (itself for a `##`)."""
    parent, found = "", {}
    for index, level, anchor in headings(lines):
        if level <= 2:
            parent = lines[index]
        found[anchor] = parent
    return found


def _cells(line: str) -> list[str]:
    return [_flat(cell) for cell in line.strip().strip("|").split("|")]


def tables(text: str) -> list[list[list[str]]]:
    """The markdown tables of TEXT, each a list of rows of cells, the header first (the |---| line dropped)."""
    found, current = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            if not re.fullmatch(r"\|(?:\s*:?-+:?\s*\|)+", line.strip()):
                current.append(_cells(line))
        elif current:
            found.append(current)
            current = []
    return found


def _names_unit(label: str, unit: str) -> bool:
    return any(re.search(rf"(?<![\w/]){re.escape(name)}(?!\w)", label) for name in ALIASES.get(unit, (unit,)))


def _in_a_table(figure: str, section: str) -> bool:
    """FIGURE's number in a cell whose column header or row label names its unit ("1007" under "run (s)")."""
    match = re.fullmatch(rf"({RANGE}) ?({UNITS})", figure)
    if not match:
        return False
    number, unit = match.groups()
    for header, *rows in tables(section):
        for row in rows:
            for column, cell in enumerate(row[1:], start=1):
                label = header[column] if column < len(header) else ""
                if (_names_unit(label, unit) or _names_unit(row[0], unit)) and _appears(number, cell):
                    return True
    return False


def missing_figures(row: str, section: str) -> list[str]:
    """The figures with a unit in ROW (a table line of the front page) that SECTION does not hold."""
    quoted = LINK.sub(r"\1", row)  # the link's text is the date; its anchor is no figure
    text = _flat(section)
    return [figure for figure in FIGURE.findall(quoted) if not (_appears(figure, text) or _in_a_table(figure, section))]


def front_page(lines: list[str]) -> list[str]:
    return lines[: lines.index(RECORD)]


def front_rows(lines: list[str]) -> list[dict[str, str]]:
    """The front page's rows as {column: cell} plus "line": the row as written."""
    page = front_page(lines)
    start = page.index(FRONT_PAGE)
    rows = []
    for table in tables("\n".join(page[start:])):
        header = table[0]
        rows += [dict(zip(header, row, strict=True)) for row in table[1:]]
    written = [line for line in page[start:] if line.startswith("|")]
    by_cells = {tuple(_cells(line)): line for line in written}
    for row in rows:
        row["line"] = by_cells[tuple(value for key, value in row.items() if key != "line")]
    return rows


LINES = BENCHMARKS.read_text().splitlines()
ROWS = front_rows(LINES)
SECTIONS = sections(LINES)
PARENTS = parents(LINES)
RECORD_ANCHORS = {anchor for index, _, anchor in headings(LINES) if index > LINES.index(RECORD)}
IDS = [f"{row['what'][:40]} ({DATE.search(row['date']).group()})" for row in ROWS]


def _anchor(row: dict[str, str]) -> str:
    links = LINK.findall(row["date"])
    assert len(links) == 1, f"the date of {row['what']!r} is not one link to its section: {row['date']!r}"
    return links[0][1]


def test_the_front_page_opens_the_file_and_is_short() -> None:
    page = front_page(LINES)
    assert LINES[0] == "# Benchmarks" and FRONT_PAGE in page, "the file opens with its title and the front page"
    assert len(page) <= MAX_LINES, f"the front page is {len(page)} lines (at most {MAX_LINES})"
    assert len(ROWS) >= 8, f"{len(ROWS)} rows: one small table per area"
    assert {"what", "figure", "machine", "stack", "date"} <= set(ROWS[0]), ROWS[0].keys()


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_each_row_links_to_a_heading_of_the_record(row: dict[str, str]) -> None:
    anchor = _anchor(row)
    assert anchor in RECORD_ANCHORS, f"{row['what']!r} links to #{anchor}, no heading below {RECORD!r}"


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_every_figure_of_a_row_is_in_the_section_it_links_to(row: dict[str, str]) -> None:
    assert re.search(r"\d", row["figure"]), f"no figure in {row['figure']!r}"
    missing = missing_figures(row["line"], SECTIONS[_anchor(row)])
    assert not missing, f"{row['what']!r}: {missing} not in the section #{_anchor(row)}"


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_each_row_names_its_machine_stack_and_a_date_of_its_section(row: dict[str, str]) -> None:
    anchor = _anchor(row)
    assert MACHINE.search(row["machine"]), f"no machine (GPU model or CPU cores) in {row['machine']!r}"
    date = LINK.sub(r"\1", row["date"])
    assert DATE.match(date), f"the date {date!r} does not start YYYY-MM-DD"
    dates = DATE.findall(SECTIONS[anchor])
    if dates:
        assert date[:10] in dates, f"{date[:10]} is not a date of the section #{anchor} ({sorted(set(dates))})"
    else:  # an undated section: the date of the commit that wrote it, said as such
        assert "commit" in date, f"#{anchor} names no date; say where {date[:10]} comes from"
    if GPU.search(row["machine"]):
        expected = PINNED_STACK if "vLLM 0.31" in PARENTS[anchor] else IMAGE_STACK
        assert row["stack"] == expected, f"{row['what']!r} ran on {expected}, not {row['stack']!r}"
    else:
        assert row["stack"] == CPU_STACK, f"a CPU row's stack is {CPU_STACK}, not {row['stack']!r}"


def test_a_figure_missing_from_its_section_is_reported() -> None:
    section = "### A run, 2026-11-28\n\nThe step took 16.9 s; 8 min 58 s in all.\n\n| rule | wall (s) |\n|---|---:|\n"
    section += "| train | 190 |\n| model (GiB) | 61.1 |\n"
    good = "| GRPO step | 16.9 s, 190 s, 61.1 GiB; 8 min 58 s | [2026-11-28](#a-run-2026-11-28) |"
    assert missing_figures(good, section) == []
    wrong = "| GRPO step | 17.0 s, 6.9 s, 19 s, 1.69 s, 190 GiB, 8 min 59 s, 0.54x | [2026-11-28](#a-run) |"
    assert missing_figures(wrong, section) == ["17.0 s", "6.9 s", "19 s", "1.69 s", "190 GiB", "8 min 59 s", "0.54x"]


def test_anchors_are_githubs() -> None:
    heading = (
        "### The merge streamed, and the GPU DAGs before and after it (issue 32, item 4): Snakemake, one lent host"
        " with 4 NVIDIA H100 80GB HBM3 (81,559 MiB each, 64 CPU cores), 2026-11-28"
    )
    assert slug(heading) == (
        "the-merge-streamed-and-the-gpu-dags-before-and-after-it-issue-32-item-4-snakemake-one-lent-host-with-4-"
        "nvidia-h100-80gb-hbm3-81559-mib-each-64-cpu-cores-2026-11-28"
    )
    assert slug("## Fault injection (`benchmarks/fault_injection.py`; `docs/reliability.md`)") == (
        "fault-injection-benchmarksfault_injectionpy-docsreliabilitymd"
    )
    lines = ["# Notes", "## Run", "```", "# not a heading", "```", "### Run"]
    assert [anchor for _, _, anchor in headings(lines)] == ["notes", "run", "run-1"]
