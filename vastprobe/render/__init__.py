"""Renderers: JSON/NDJSON (no rich import) and the terminal table."""
