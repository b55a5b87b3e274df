"""Standalone HTML pages of the evaluation tables, for ``snakemake --report``.

The report shows HTML inline but offers markdown only as a download, so every table that belongs in
the report is written as markdown (the published tables' format, :func:`arc_pipeline.scoring.tables.to_markdown`)
and as a page built from that same markdown: both always show the same numbers.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence

_CELL_SPLIT = re.compile(r"(?<!\\)\|")

STYLE = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.3em; } h2 { font-size: 1.1em; margin-top: 1.6em; }
p.note { color: #555; max-width: 60em; }
table { border-collapse: collapse; font-size: 0.85em; margin-bottom: 1em; }
th, td { border: 1px solid #bbb; padding: 3px 7px; }
th { background: #e8eef6; position: sticky; top: 0; max-width: 7em; overflow-wrap: anywhere; }
td { white-space: nowrap; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr:nth-child(even) td { background: #f7f7f7; }
"""


def _cells(line: str) -> list[str]:
    inner = line.strip()
    inner = inner.removeprefix("|")
    inner = inner[:-1] if inner.endswith("|") and not inner.endswith("\\|") else inner
    return [cell.strip().replace("\\|", "|") for cell in _CELL_SPLIT.split(inner)]


def _is_number(cell: str) -> bool:
    return bool(re.fullmatch(r"-?[0-9.]+%?|-", cell))


def markdown_table_html(markdown: str) -> str:
    """An HTML ``<table>`` from a pipe table (header, rule line, rows); other lines are ignored."""
    lines = [line for line in markdown.splitlines() if line.strip().startswith("|")]
    if len(lines) < 2:
        return "<p>(empty table)</p>"
    header = _cells(lines[0])
    parts = [
        "<table>",
        "<thead><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in header) + "</tr></thead>",
        "<tbody>",
    ]
    for line in lines[2:]:
        cells = _cells(line)
        parts.append(
            "<tr>"
            + "".join(
                f'<td class="num">{html.escape(c)}</td>' if _is_number(c) else f"<td>{html.escape(c)}</td>"
                for c in cells
            )
            + "</tr>"
        )
    parts.append("</tbody></table>")
    return "\n".join(parts)


def page(title: str, sections: Sequence[tuple[str, str, str]]) -> str:
    """A standalone page: ``sections`` are (heading, note, markdown table); empty parts are skipped."""
    body = [f"<h1>{html.escape(title)}</h1>"]
    for heading, note, table in sections:
        if heading:
            body.append(f"<h2>{html.escape(heading)}</h2>")
        if note:
            body.append(f'<p class="note">{html.escape(note)}</p>')
        if table:
            body.append(markdown_table_html(table))
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head>\n<body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )
