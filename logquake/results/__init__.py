"""Run store, HTML report, junit, web server (DESIGN.md §9)."""
