"""What the ablation and workload studies leave in their folder, for ``analyze report --study DIR``.

``sections.json`` lists one section per ablation (or workload replay), in the order first
written: title, caption, notes, its tables (``tables/<name>.csv`` and ``.md``; the per-context
rows behind them in ``tables/<section>_long.csv``) and its figures (``figures/*.png``, each with
its CSV). Running one ablation again replaces its section in place and keeps the others.
"""

from __future__ import annotations

import json
from pathlib import Path

from .harness import Section

__all__ = ["SECTIONS", "write_section", "read_sections"]

SECTIONS = "sections.json"


def read_sections(folder: str | Path) -> dict:
    """The folder's manifest (``about`` and ``sections``), empty when it has none."""
    path = Path(folder) / SECTIONS
    if not path.is_file():
        return {"about": "", "sections": []}
    return json.loads(path.read_text())


def write_section(out: str | Path, section: Section, *, about: str) -> Path:
    """Write ``section``'s tables and long rows into ``out`` and record it in ``sections.json``."""
    from ..tables import write_table

    out = Path(out)
    for name, table in section.tables.items():
        write_table(table, out, name=name)
    section.long.to_csv(out / "tables" / f"{section.name}_long.csv", index=False)
    entry = {"name": section.name, "title": section.title, "caption": section.caption, "notes": section.notes,
             "tables": list(section.tables), "figures": [p.relative_to(out).as_posix() for p in section.figures]}
    doc = read_sections(out)
    doc["about"] = about
    names = [s["name"] for s in doc["sections"]]
    if section.name in names:
        doc["sections"][names.index(section.name)] = entry
    else:
        doc["sections"].append(entry)
    path = out / SECTIONS
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return path
