"""The system under test: a Kafka-wire-compatible replicated log (DESIGN.md §3)."""
