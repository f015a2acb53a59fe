"""Table copies of the report and the studies: CSV, Markdown (pandas' ``to_markdown``) and the HTML the page embeds.

The CSV and Markdown copies keep the snake_case column names that scripts, the CLI's printed
tables and the study commands use; the HTML the page shows carries the readable headers of
:mod:`.headers`.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .headers import readable_columns

__all__ = ["to_markdown", "write_table"]


def to_markdown(frame: pd.DataFrame, *, digits: int = 3) -> str:
    """A GitHub-flavoured Markdown table; missing values print as empty cells."""
    return frame.to_markdown(index=False, floatfmt=f".{digits}g", missingval="") + "\n"


def write_table(frame: pd.DataFrame, out: Path, *, name: str) -> dict:
    """Write ``<name>.csv`` and ``<name>.md`` into ``out/tables``; return what the template needs."""
    folder = out / "tables"
    folder.mkdir(parents=True, exist_ok=True)
    frame.to_csv(folder / f"{name}.csv", index=False)
    (folder / f"{name}.md").write_text(to_markdown(frame))
    html = readable_columns(frame).to_html(index=False, border=0, classes="t", float_format=lambda v: f"{v:.2f}", na_rep="")
    return {"name": name, "html": html, "csv": f"tables/{name}.csv", "md": f"tables/{name}.md", "rows": len(frame)}
