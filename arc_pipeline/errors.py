"""The project's one error type for problems a user can fix.

Library code raises :class:`PipelineError` (or a subclass) with a message that names the file, the
config field or the task and says what to do. ``cli.main`` catches it once and prints one line,
``arc-pipeline <command>: <message>``, with exit status 1; any other exception is a bug and keeps
its traceback. Nothing outside ``cli.py`` raises ``SystemExit``.
"""

from __future__ import annotations


class PipelineError(Exception):
    """A user-fixable error; the message is the whole story (no traceback is shown)."""
