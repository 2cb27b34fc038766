"""Tables: Markdown and plain text renderers, and the benchmark row's columns.

One renderer per format, shared by every entry module: :func:`markdown_table` (padded, readable
as plain text too: ``benchmarks.run``, ``benchmarks.growth``) and :func:`text_table` (compact
Markdown or aligned text: ``benchmarks.traffic``). :data:`HEADER` and :func:`fmt_row` are the
columns of a ``benchmarks.run`` row (explained in that module's docstring); a new column is a
change to both.
"""

from __future__ import annotations

import math

HEADER = ["method", "wall s", "×read", "×gram", "peak GB", "passes", "reads", "sin θ", "other CPU", "note"]


def fmt_row(row: dict, floors: dict, stored: int) -> list[str]:
    """The :data:`HEADER` cells of one row (``floors``: floor name → wall s; ``stored``: input bytes)."""
    def num(x, f):
        return "" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, f)

    ok = row.get("status") == "ok"
    wall = row.get("wall") if ok else None
    xr = wall / floors["floor-read"] if ok and floors.get("floor-read") else None
    xg = wall / floors["floor-gram"] if ok and floors.get("floor-gram") else None
    reads = row.get("read_bytes") / stored if ok and row.get("read_bytes") is not None and stored else None
    sin = row.get("sin_theta")
    note = row.get("note") or ""
    if not ok:
        note = f"{row.get('status')}: {note}"
    elif row.get("scheduler") != "threads":
        note = f"[{row['scheduler']}] {note}".strip()
    return [
        row["method"],
        num(wall, ".2f"),
        num(xr, ".2f"),
        num(xg, ".2f"),
        num(row.get("peak_rss", 0) / 1e9, ".2f") if row.get("status") != "skip" else "",
        "" if row.get("passes") is None else str(row["passes"]),
        num(reads, ".2f"),
        "" if sin is None else ("—" if isinstance(sin, float) and math.isnan(sin) else f"{sin:.1e}"),
        "" if row.get("other_cpu_pct") is None or row.get("status") == "skip" else f"{row['other_cpu_pct']:.0f}%",
        note,
    ]


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table with padded columns (readable as plain text too)."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    line = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])


def render_table(rows: list[list[str]]) -> str:
    """A ``benchmarks.run`` table: :data:`HEADER` over rows made by :func:`fmt_row`."""
    return markdown_table(HEADER, rows)


def text_table(header: list[str], rows: list[list], markdown: bool) -> str:
    """Compact markdown (``|---|`` rules, cells unpadded: docs/scaling.md's blocks) or aligned plain text."""
    cells = [[str(c) for c in row] for row in [header, *rows]]
    if markdown:
        lines = ["| " + " | ".join(row) + " |" for row in cells]
        lines.insert(1, "|" + "|".join("---" for _ in header) + "|")
        return "\n".join(lines)
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells)
