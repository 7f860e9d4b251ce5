"""Every way a search stops before its last trial, said honestly.

Ctrl-C (SIGINT) and SIGTERM do not kill the driver: :func:`catch_signals` records the signal in :class:`Stop` and
asks Tune to end the experiment the way Tune ends one on Ctrl-C (SIGUSR1, which Tune always listens to): its state
saved one last time, the unfinished trials resumable with ``--resume``. A second signal stops at once. A failure no
retry can fix (no space left on the storage device, the storage folder gone or read-only: :func:`systemic_cause`;
MLflow writes lost after the writer's retries: the trial logger) stops the search the same way at its first
occurrence, instead of failing every remaining trial. The search then reports why it stopped, marks what did not
finish as interrupted (never as stopped early: that is the scheduler's word) and exits 130, 143 or 1.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from istar_tune.errors import STORAGE_FAILURES

SYSTEMIC = (
    *STORAGE_FAILURES,
    (re.compile(r"storage path .* (is gone|does not exist)|No such file or directory: '[^']*(experiment_state|"
                r"checkpoint_\d+|result\.json)"), "the storage folder is gone"),
    (re.compile(r"Unable to set up cluster storage|does not exist on storage anymore"),
     "the results folder is gone (deleted while the search ran) or not shared with the trial's node"),
)
"""Error texts whose cause is the machine or a service, not the configuration a trial tried."""


GONE = ("the storage folder is gone", "the results folder is gone")
"""Systemic causes that take the search's saved state with them: ``--resume`` has nothing to continue."""


def way_on(reason: str) -> str:
    """What a search stopped by a systemic failure (``reason``) can do next."""
    if any(cause in reason for cause in GONE):
        return ("its saved state went with the folder, so --resume cannot continue it: move what is left of the "
                "folder away and run the search again, or give --name for a new one (finished trials are in MLflow)")
    return "fix that, then continue with --resume"


def systemic_cause(error_text: str) -> str:
    """What in ``error_text`` no retry or other configuration can fix; empty when nothing is."""
    for pattern, cause in SYSTEMIC:
        if pattern.search(error_text or ""):
            return cause
    return ""


class Terminated(KeyboardInterrupt):
    """SIGTERM, stopping a command as Ctrl-C does (runs marked KILLED, exit code 143)."""


class Stop:
    """Why the search is being stopped (empty while it is not): a signal, or a systemic failure. Setting a reason
    asks Tune, in the driver, to end the experiment (SIGUSR1 to this process, which Tune handles as Ctrl-C); before
    Tune runs it interrupts at once, except inside :meth:`deferred` (writing what must not be cut halfway)."""

    def __init__(self):
        self.reason = ""
        self.signal_number = 0
        self.systemic = False
        self.deferring = False

    def set(self, reason: str, signal_number: int = 0) -> None:
        if not self.reason:
            self.reason, self.signal_number = reason, signal_number
            if not self.deferring:
                _end_tune_run(signal_number)

    def fail(self, cause: str, seen: str) -> None:
        """Stop for a systemic failure: ``cause`` in words, ``seen`` the error line it was read from."""
        if not self.reason:
            first = (seen.strip().splitlines() or [""])[0][:300]  # the summary's STOPPED line stays one line
            self.reason, self.systemic = f"systemic failure: {cause} ({first})", True
            if not self.deferring:
                _end_tune_run()

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """A section a signal must not cut (creating the tracking store's tables, the searches' parent runs): a
        signal in it is recorded, and the caller reads :attr:`reason` after it."""
        self.deferring = True
        try:
            yield
        finally:
            self.deferring = False


def _end_tune_run(signal_number: int = 0) -> None:
    """Ask the running Tune experiment to end; before Tune runs (it installs its SIGUSR1 handler when it starts)
    there is nothing to save: stop at once."""
    if not hasattr(signal, "SIGUSR1") or signal.getsignal(signal.SIGUSR1) in (signal.SIG_DFL, signal.SIG_IGN, None,
                                                                             _before_tune):
        raise Terminated() if signal_number == signal.SIGTERM else KeyboardInterrupt()
    os.kill(os.getpid(), signal.SIGUSR1)


def _before_tune(number, frame) -> None:
    """SIGUSR1 before Tune listens for it: ignored (its default would end the process)."""


_NAMES = {signal.SIGINT: "SIGINT (Ctrl-C)", signal.SIGTERM: "SIGTERM"}


@contextlib.contextmanager
def catch_signals(stop: Stop) -> Iterator[Callable[[], None]]:
    """While the search runs: the first SIGINT or SIGTERM asks :class:`Stop` to end it (the trials stop, Tune
    saves its state); a second one interrupts at once (KeyboardInterrupt). Only in the main thread. Yields a function
    that installs the handlers again, for after a library put its own in (``ray.init`` handles SIGTERM itself)."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return

    def handle(number, frame):
        if stop.reason and not stop.deferring:
            raise Terminated() if number == signal.SIGTERM else KeyboardInterrupt()
        stop.set(f"interrupted by {_NAMES.get(number, number)}", number)

    previous = {number: signal.signal(number, handle) for number in _NAMES}
    if hasattr(signal, "SIGUSR1") and signal.getsignal(signal.SIGUSR1) in (signal.SIG_DFL, None):
        previous[signal.SIGUSR1] = signal.signal(signal.SIGUSR1, _before_tune)

    def again() -> None:
        for number in _NAMES:
            signal.signal(number, handle)

    try:
        yield again
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _traceback(record: logging.LogRecord) -> bool:
    """A Ray or MLflow record that carries a traceback (a failed trial, a failed sync, a failed write to the store):
    many lines, for the log file."""
    return record.name.startswith(("ray", "mlflow")) and record.levelno >= logging.WARNING and (
        bool(record.exc_info) or "\n" in record.getMessage())


REPEATED_BY_THE_SUMMARY = ("Stop signal received", "Trials did not complete")


class _KeepOut(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        # Tune's "Stop signal received ..." and "Trials did not complete: [...]" repeat, in its words, what the
        # search's summary says.
        return not _traceback(record) and not record.getMessage().startswith(REPEATED_BY_THE_SUMMARY)


class _KeepIn(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return _traceback(record)


@contextlib.contextmanager
def errors_to_file(path: Path) -> Iterator[None]:
    """While the experiment runs, Ray's records that carry a traceback (each failed trial's, each failed sync's) go
    to ``path`` instead of the terminal, where the search prints one line per failed trial."""
    handler = logging.FileHandler(path, delay=True, encoding="utf-8")
    handler.handleError = lambda record: None  # a full or vanished disk loses the log, not the search's ending
    handler.addFilter(_KeepIn())
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    loggers = [logging.getLogger(name) for name in ("ray", "mlflow")]
    terminal = [h for name in ("", "ray", "ray.tune", "ray.train", "mlflow") for h in logging.getLogger(name).handlers]
    keep_out = _KeepOut()
    for existing in terminal:
        existing.addFilter(keep_out)
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
        with contextlib.suppress(OSError):
            handler.close()
        for existing in terminal:
            existing.removeFilter(keep_out)
