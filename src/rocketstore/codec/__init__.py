"""Bytes <-> values for every on-disk structure. Pure functions and constants, no I/O."""
