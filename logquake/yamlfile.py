"""Reading a YAML file that must hold a mapping: the one loader for every config file.

A test config, a node.yaml and a matrix file all fail the same ways (missing, unreadable, not
YAML, not a mapping); each failure is a ConfigError naming the key the user gave the file by
and, for bad YAML, the line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from logquake.errors import ConfigError

__all__ = ["load_mapping"]


def load_mapping(path: str | Path, *, key: str = "config", holds: str = "keys to values") -> dict[str, Any]:
    """The mapping in the YAML file at `path` ({} for an empty file), or ConfigError naming `key`."""
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(key, f"no such file: {p}") from None
    except OSError as e:
        raise ConfigError(key, f"cannot read {p}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(key, f"{p} is not UTF-8 text: {e.reason} at byte {e.start}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(key, f"{p} is not valid YAML{where}: {getattr(e, 'problem', None) or e}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(key, f"{p} must hold a mapping of {holds}, got {type(data).__name__}")
    return data
