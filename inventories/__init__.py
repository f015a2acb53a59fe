"""Inventory YAML files, one per fabric (a data package)."""
