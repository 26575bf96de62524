"""Operational databases into Delta Lake, as Dagster assets."""
