"""What a person reads while a command runs: one line to standard output, flushed at once (a search's progress, a
trial's heartbeat through Ray, a status redraw). The one place outside the command line that prints."""

from __future__ import annotations


def say(text: str) -> None:
    """``text`` as one line (or lines) on standard output, flushed: a line must reach a terminal, a log file or Ray's
    log stream when it is written, not when a buffer fills."""
    print(text, flush=True)  # noqa: T201 - the one print of the library
