"""Generators and Kafka client adapters (DESIGN.md §6)."""
