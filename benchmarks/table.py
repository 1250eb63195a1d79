"""The plain-text table the benchmarks print: one row per dict, the given columns, floats to 3 digits
(a column a row lacks: "-")."""

from __future__ import annotations


def print_table(rows: list[dict], cols: list[str]) -> None:
    cells = [[f"{r[c]:.3g}" if isinstance(r.get(c), float) else str(r.get(c, "-")) for c in cols] for r in rows]
    widths = [max(len(c), *(len(x[i]) for x in cells)) for i, c in enumerate(cols)]
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths)))
    print("  ".join("-" * w for w in widths))
    for x in cells:
        print("  ".join(v.ljust(w) for v, w in zip(x, widths)))
