"""The exceptions logquake raises on purpose.

    LogquakeError                  root: cli.py catches it, prints it in red, no traceback
    ├── UserError                  the user can fix it; carries a `hint`
    │   ├── ConfigError            a config key has a bad value (names key, value, allowed)
    │   ├── HistoryFormatError     a history file is malformed (names file and line)
    │   └── MissingPrerequisite    a tool, privilege or kernel feature is missing
    └── HostError                  a command on a node failed (node, command, rc, stderr)

Anything else escaping to the CLI is a logquake bug and keeps its traceback. A misbehaving
system under test is never an exception: it becomes fail/info ops and anomalies.
"""

from __future__ import annotations


class LogquakeError(Exception):
    """Root of every error logquake raises deliberately."""

    hint: str | None = None

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        if hint is not None:
            self.hint = hint


class UserError(LogquakeError):
    """Something the user can fix: bad input, missing tool, wrong command."""


class ConfigError(UserError):
    """A configuration key holds a value that is not allowed."""

    def __init__(self, key: str, message: str, *, hint: str | None = None) -> None:
        super().__init__(f"{key}: {message}", hint=hint)
        self.key = key
        self.message = message

    def under(self, parent: str) -> ConfigError:
        """The same error for a key nested in `parent` (`parent.key`)."""
        return ConfigError(f"{parent}.{self.key}", self.message, hint=self.hint)


class HistoryFormatError(UserError):
    """A history file is malformed at a given line."""

    def __init__(self, path: str, line: int, message: str) -> None:
        super().__init__(f"{path}:{line}: {message}" if line else f"{path}: {message}")  # 0: the file itself
        self.path = path
        self.line = line


class MissingPrerequisite(UserError):
    """A tool, privilege or kernel feature logquake needs is not there."""


class HostError(LogquakeError):
    """A command on a node failed."""

    def __init__(self, node: str, command: str, rc: int, stderr: str) -> None:
        tail = stderr.strip().splitlines()[-5:]
        super().__init__(f"{node}: `{command}` exited {rc}" + (": " + " | ".join(tail) if tail else ""))
        self.node = node
        self.command = command
        self.rc = rc
        self.stderr = stderr
