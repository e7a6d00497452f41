"""Hosts (lab, docker, ssh, external) and the broker's lifecycle on them (DESIGN.md §4)."""
