"""logquake: a Jepsen-style fault-injection test harness for replicated logs."""

__version__ = "0.1.0"
