"""The failures a user can fix, as one family of exceptions that every layer may raise.

Each message is one line that names the file or the flag at fault and the fix. The command lines
(`r2s2r/scripts/cli.py`) print it as `<command>: error: <message>` and exit with status 2; Python callers
catch `UserError` or the built-in type each class also is (a damaged file is a `ValueError`, a full disk an
`OSError`), so code written against the built-in types keeps working.
"""

from __future__ import annotations


class UserError(Exception):
    """A failure the user can fix: a bad input, a damaged file, a refused setting, a full disk."""


class DamagedFileError(UserError, ValueError):
    """A file that exists but cannot be read as what it should be: truncated, corrupt or half-written."""


class SettingsChangedError(UserError, ValueError):
    """A resumed run asked for settings other than the ones it was started with."""


class DiskFullError(UserError, OSError):
    """The disk filled up while writing; what was half-written has been removed."""


class ModelMismatchError(UserError, ValueError):
    """A world model asked for what it cannot do: start from observations its state head cannot read."""
