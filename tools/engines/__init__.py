"""Engines the investigator measures on the box, each runnable as ``python -m tools.engines.<name>``."""
