"""Faults and their schedule (DESIGN.md §5)."""
