"""Tune's own state in a results folder: whether it reads back whole, the whole copy kept beside it, and the repair a
``--resume`` makes before Tune restores it.

Tune writes its experiment state (``experiment_state-*.json``, every trial's status and checkpoint) in place, not
atomically: a storage device that fills while Tune writes it leaves the file cut short, and no ``Tuner.restore`` can
read it again. Its searcher's state can also run ahead of the experiment state (a trial handed out, the experiment
state not written since): that configuration would never run again, and every ``--resume`` would end "interrupted".
While a search runs, :class:`StateCopier` keeps the newest state that reads back whole and agrees with itself in
``.istar-tune-state/``; before ``--resume``, :func:`repair` gives the searcher back the trials the experiment state
does not hold, or puts the whole copy back in place of a state cut short (the cut-short files are set aside, never
deleted). A configuration that runs again takes over the MLflow run its lost trial had started (no second run).
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import re
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ray.tune import Callback

from istar_tune.errors import ConfigError
from istar_tune.tracking.storage import is_remote

log = logging.getLogger(__name__)

KINDS = {"experiment": "experiment_state-*.json", "generator": "search_gen_state-*.json",
         "searcher": "searcher-state-*.pkl", "callbacks": "callback-states-*.pkl", "tuner": "tuner.pkl"}
"""Tune's state files in an experiment folder; of each kind Tune reads the newest (by name) on restore."""
COPY = ".istar-tune-state"
"""The whole copy, in the results folder."""
SET_ASIDE = "tune-state-cut-short"
"""Where a repair moves a state that did not read back (with the time), in the results folder."""


@dataclass
class TuneState:
    """The newest state file of each kind in a folder, read back."""

    files: list[Path]
    trials: set[str]
    """Trial ids the experiment state holds."""
    handed: set[str] | None
    """Trial ids the searcher handed out (``None``: a searcher that does not record them)."""

    @property
    def ahead(self) -> set[str]:
        """Trials the searcher handed out that the experiment state does not hold."""
        return set() if self.handed is None else self.handed - self.trials

    @property
    def agrees(self) -> bool:
        return self.handed is None or self.handed == self.trials


def _newest(folder: Path) -> list[Path]:
    return [max(found) for pattern in KINDS.values() if (found := list(folder.glob(pattern)))]


_TRIAL_ID = re.compile(rb'\\"trial_id\\": \\"([^\\"]+)\\"')
"""A trial's id in the experiment state file (each trial's state is a JSON string inside the file's JSON)."""


def read(folder: Path, quick: bool = False) -> TuneState | str:
    """The state in ``folder``, or why it cannot be read back (the file, its size, what is wrong with it).
    ``quick``: the experiment state (about 20 KB a trial) is not parsed but checked to end as Tune ends it (Tune
    writes it front to back, so a cut leaves no end), its trial ids found in its text; what a restore reads is always
    parsed."""
    import ray.cloudpickle as cloudpickle

    files, trials, handed = _newest(folder), set(), None
    if not any(f.match(KINDS["experiment"]) for f in files):
        return f"no {KINDS['experiment']} in {folder}"
    for path in files:
        data = b""
        try:
            data = path.read_bytes()
            if path.match(KINDS["experiment"]) and quick:
                if not data.rstrip().endswith(b"}}") or b'"stats": {' not in data[-4096:]:
                    raise ValueError("the file does not end as Tune ends it")
                trials = {t.decode() for t in _TRIAL_ID.findall(data)}
            elif path.match(KINDS["experiment"]):
                trials = {json.loads(t[0])["trial_id"] for t in json.loads(data)["trial_data"]}
            elif path.match(KINDS["searcher"]):
                handed = _handed(pickle.loads(data))
            else:
                cloudpickle.loads(data)
        except Exception as err:  # noqa: BLE001 - cut short, empty or garbled: what Tune cannot restore either
            said = str(err).splitlines()[0][:120] if str(err) else ""
            return f"{path.name} ({len(data):,} bytes) does not read back: {type(err).__name__}: {said}"
    return TuneState(files=files, trials=trials, handed=handed)


def _handed(searcher: dict) -> set[str] | None:
    handed = searcher.get("handed") if isinstance(searcher, dict) else None
    return None if handed is None else set(handed)


def repair(results_root: str, say) -> set[str] | None:
    """Before Tune restores ``results_root``: a state that reads back and agrees with itself is left alone; a searcher
    that ran ahead gets back what it handed out to trials the experiment state does not hold; a state that does not
    read back (or whose searcher fell behind) is set aside and its whole copy put in its place, else refused with the
    way out. Returns the trial ids Tune will restore (none where Tune wrote no state; ``None``: a remote folder, not
    checked); the MLflow runs of any other trial of the search may be taken over by a trial of the same
    configuration."""
    if is_remote(results_root):
        return None
    root = Path(results_root)
    state = read(root)
    if isinstance(state, TuneState) and state.agrees:
        return state.trials
    if isinstance(state, TuneState) and state.handed is not None and state.handed > state.trials:
        _give_back(next(f for f in state.files if f.match(KINDS["searcher"])), state.ahead)
        say(f"resume: Tune's state in {root} holds {len(state.trials)} trials but its searcher had handed out "
            f"{len(state.handed)} (the driver stopped before the state was written): the "
            f"{len(state.ahead)} missing run again, each in the MLflow run it started")
        return state.trials
    why = state if isinstance(state, str) else "its searcher's state is older than its experiment state"
    copy = _whole_copy(root)
    if copy is None and not any(root.glob(KINDS["experiment"])):
        return set()  # Tune wrote no state: its trials start again, each configuration in the run it started
    if copy is None and _empty_state(root) and not _finished_trials(root):
        aside = _set_aside(root)
        say(f"resume: Tune's state in {root} is empty (0 bytes: the driver stopped as Tune began writing it) and no "
            f"trial had finished: set aside in {aside.name}/, and the search starts again as with no state, each "
            "configuration in the MLflow run it started")
        return set()
    if copy is None:
        raise ConfigError(f"--resume: Tune's state in {root} cannot be restored ({why}; the storage device filled "
                          "while Tune wrote it?) and istar-tune holds no whole copy of it: the runs MLflow holds stay; "
                          "run the search again under a new name (--name NEW)")
    aside = _set_aside(root)
    for path in copy.files:
        shutil.copy2(path, root / path.name)
    stamp = time.strftime("%H:%M:%S", time.localtime(max(p.stat().st_mtime for p in copy.files)))
    say(f"resume: Tune's state in {root} was cut short ({why}); set aside in {aside.name}/ and its last whole copy "
        f"(of {stamp}, {len(copy.trials)} trials) put back: trials started after it run again, each in the MLflow run "
        "it started")
    return copy.trials


def _set_aside(root: Path) -> Path:
    """Tune's state files moved (never deleted) into a dated folder of the results folder."""
    aside = root / f"{SET_ASIDE}-{time.strftime('%Y%m%d-%H%M%S')}"
    aside.mkdir(exist_ok=True)
    for path in [p for pattern in KINDS.values() for p in root.glob(pattern)]:
        path.rename(aside / path.name)
    return aside


def _empty_state(root: Path) -> bool:
    """The newest experiment state is an empty file (Tune had created it and written nothing)."""
    newest = max(root.glob(KINDS["experiment"]), default=None)
    return newest is not None and newest.stat().st_size == 0


def _finished_trials(root: Path) -> list[Path]:
    """Trial folders whose results say the trial finished (``done``): what a restart would train again."""
    finished = []
    for results in root.glob("*/result.json"):
        with open(results, "rb") as handle:
            if any(b'"done": true' in line for line in handle):
                finished.append(results.parent)
    return finished


def _whole_copy(root: Path) -> TuneState | None:
    for folder in (root / COPY, root / f"{COPY}-old"):
        state = read(folder) if folder.is_dir() else None
        if isinstance(state, TuneState) and state.agrees:
            return state
    return None


def _give_back(path: Path, trial_ids: set[str]) -> None:
    """Rewrite the searcher state at ``path`` with the trials ``trial_ids`` handed back (atomically)."""
    from istar_tune.search.tune.searcher import GroupSearcher

    searcher = GroupSearcher.__new__(GroupSearcher)
    searcher.restore(str(path))
    searcher.give_back(trial_ids)
    partial = path.with_name(f".{path.name}.partial")
    searcher.save(str(partial))
    os.replace(partial, path)


class StateCopier(Callback):
    """Keeps ``.istar-tune-state/``: a copy of the newest Tune state of the results folder that reads back whole and
    agrees with itself, looked for at most every ``every_s`` seconds (longer when a copy takes long) in a thread of its
    own (Tune's loop never waits for it), and once more at the experiment's end. A copy replaces the one before only
    once it is complete."""

    def __init__(self, results_root: str, every_s: float = 1.0):
        self.root = Path(results_root)
        self.every_s = every_s
        self._next = 0.0
        self._copied: tuple = ()
        self._thread: threading.Thread | None = None

    def __getstate__(self):
        return {**self.__dict__, "_thread": None}

    def on_step_end(self, iteration, trials, **info):
        if time.monotonic() >= self._next and (self._thread is None or not self._thread.is_alive()):
            self._thread = threading.Thread(target=self._timed_copy, name="istar-tune-state-copy", daemon=True)
            self._thread.start()

    def _timed_copy(self) -> None:
        began = time.monotonic()
        self.copy()
        self._next = time.monotonic() + max(self.every_s, 20 * (time.monotonic() - began))

    def on_experiment_end(self, trials, **info):
        if self._thread is not None:
            self._thread.join()
        self.copy()

    def copy(self) -> bool:
        """Copy the state now if it changed, reads back and agrees with itself; whether a copy was made."""
        files = _newest(self.root)
        try:
            seen = tuple((f.name, f.stat().st_mtime_ns, f.stat().st_size) for f in files)
            state = read(self.root, quick=True) if seen != self._copied else None
            if not isinstance(state, TuneState) or not state.agrees:
                return False
            fresh, copy, old = (self.root / f"{COPY}{s}" for s in ("-new", "", "-old"))
            shutil.rmtree(fresh, ignore_errors=True)
            fresh.mkdir()
            for path in state.files:
                shutil.copy2(path, fresh / path.name)
            copied = read(fresh, quick=True)  # Tune may have rewritten a file since it was read: check the copy itself
            if not isinstance(copied, TuneState) or not copied.agrees:
                return False
            shutil.rmtree(old, ignore_errors=True)
            if copy.exists():
                copy.rename(old)
            fresh.rename(copy)
            shutil.rmtree(old, ignore_errors=True)
        except OSError as err:  # a full disk: the copy before stays, and the search's own checks say the rest
            log.debug("copying Tune's state failed: %s", err)
            return False
        self._copied = seen
        return True
