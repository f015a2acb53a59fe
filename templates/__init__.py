"""Jinja templates: Slurm job scripts and the HTML report (a data package)."""
