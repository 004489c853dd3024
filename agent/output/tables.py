"""Plain aligned text tables, as the commands and the demos print them."""

from __future__ import annotations


def format_table(columns: list[str], rows: list[dict[str, object]]) -> str:
    """A plain aligned text table; None prints as '-'."""
    cells = [[("-" if row.get(col) is None else str(row.get(col))) for col in columns] for row in rows]
    widths = [max([len(col.upper())] + [len(r[i]) for r in cells]) for i, col in enumerate(columns)]
    lines = ["  ".join(col.upper().ljust(w) for col, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(line.rstrip() for line in lines)
