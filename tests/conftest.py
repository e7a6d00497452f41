"""Shared test fixtures."""

from __future__ import annotations

import os
import shutil

import pytest


def requires_root_or_userns() -> None:
    """Skip (with the reason) when this machine cannot make network namespaces."""
    if os.geteuid() != 0 and not shutil.which("unshare"):
        pytest.skip("needs root or unshare for network namespaces")
