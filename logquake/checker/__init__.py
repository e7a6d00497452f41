"""History analyses (DESIGN.md §8)."""
