"""The report's one Jinja environment (templates shipped in ``ncclbot_sweep.resources.templates``)."""

from __future__ import annotations

import functools
from pathlib import Path

__all__ = ["render_page"]


@functools.cache
def _environment():
    import jinja2

    from ncclbot_sweep.resources import resource_dir

    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(resource_dir("templates"))),
                              autoescape=jinja2.select_autoescape(["html", "j2"]), undefined=jinja2.StrictUndefined)


def render_page(path: Path, template: str, context: dict) -> Path:
    """Render ``template`` with ``context`` into ``path``; return ``path``."""
    path.write_text(_environment().get_template(template).render(**context))
    return path
