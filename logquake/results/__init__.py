"""Run store, HTML report, junit, web server (docs/architecture.md).

The report and server names load lazily (PEP 562): they pull in plotly and jinja2, which
commands that only touch the run store should not pay for at start-up.
"""

from importlib import import_module
from typing import Any

_LAZY = {
    "write_report": "logquake.results.report",
    "render_report": "logquake.results.report",
    "load_run": "logquake.results.report",
    "digest_history": "logquake.results.digest",
    "make_server": "logquake.results.serve",
    "scan_runs": "logquake.results.serve",
    "write_profiles_report": "logquake.results.profiles",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["digest_history", "load_run", "make_server", "render_report", "scan_runs", "write_profiles_report",
           "write_report"]
