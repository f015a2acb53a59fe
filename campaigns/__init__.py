"""Example campaign specs (a data package)."""
