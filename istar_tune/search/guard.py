"""One search at a time per results folder, and ``--resume`` only of the search that was started.

:func:`hold` takes an exclusive lock beside the results folder for as long as the search runs (a second search of the
same name on the same storage path, a second ``--resume`` included, is refused with one line naming the first).
:func:`check_plan` stores what a search plans (its groups, their domains and trial counts, its settings) when it
starts, and refuses a ``--resume`` whose space plans something else: Tune would silently go on with the old grid. The
lock is a local file lock (``fcntl``): with a remote storage path (a bucket) it is skipped, as is the stored plan.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from istar_tune.errors import ConfigError
from istar_tune.search.backends import canonical
from istar_tune.search.plan import PlannedGroup
from istar_tune.search.spaces.space import SearchSpace
from istar_tune.tasks import Task
from istar_tune.tracking.storage import is_remote, join, storage_root

PLAN_FILE = "istar-tune-plan.json"
"""In the results folder: what the search planned when it started (compared on ``--resume``)."""


class Lock:
    """A held lock file; leaving its ``with`` block, :meth:`release` or the process ending (however it ends) frees
    it."""

    def __init__(self, path: Path | None, handle=None):
        self.path, self.handle = path, handle

    def __enter__(self) -> Lock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def release(self) -> None:
        if self.handle is not None:
            fcntl.flock(self.handle, fcntl.LOCK_UN)
            self.handle.close()
            self.handle = None


def hold(storage: str, name: str) -> Lock:
    """The lock of search ``name`` under ``storage``; a :class:`ConfigError` naming the holder when another search
    (this machine's or another's, on a shared folder) holds it."""
    if is_remote(storage):
        return Lock(None)
    path = Path(storage) / f".{name}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a+")  # noqa: SIM115 - held open for the whole search
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise ConfigError(f"search {name!r} in {storage} is already running ({holder}): wait for it to end or stop "
                          "it; two searches in one results folder would run the same trials twice") from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()} on {socket.gethostname()}, since {time.strftime('%Y-%m-%d %H:%M:%S')}")
    handle.flush()
    return Lock(path, handle)


def fingerprint(spaces: list[SearchSpace], planned: dict[str, list[PlannedGroup]]) -> dict[str, Any]:
    """What the searches plan, as plain data: per search, each group's domains, extra values and trial count, and
    the search's algorithm, samples, stage, seeds and settings."""
    def group(p: PlannedGroup) -> dict[str, Any]:
        shared = {"tune_trials": p.trainings} if p.trainings != p.trials else {}  # one without sharing reads as before
        return {"group": p.group.key, "trials": p.trials, "after": p.after, **shared,
                "domains": {k: [d.kind, list(d.values)] for k, d in sorted(p.group.domains.items())},
                "values": dict(sorted(p.param_space.items()))}

    def study(space: SearchSpace) -> dict[str, Any]:  # a seeds stage without a study reads as before
        varied = {"vary": [space.vary[0], {m: list(v) for m, v in space.vary[1].items()}]} if space.vary else {}
        return {**varied, **({"start_from": space.start_from} if space.start_from else {}),
                **({"choose_by": space.choose_by} if space.choose_by != "auto" else {})}

    return {space.name: {"algorithm": space.algorithm, "num_samples": space.num_samples, "stage": space.stage,
                         "seeds": list(space.seeds), **study(space), "settings": dict(sorted(space.settings.items())),
                         "groups": [group(p) for p in planned[name]]}
            for name, space in zip(planned, spaces)}


def check_plan(results_root: str, plan: dict[str, Any], resume: bool,
               accept_changed: bool = False) -> dict[str, Any] | None:
    """On a new search, remember ``plan``; on ``--resume``, refuse one that differs from the remembered plan (unless
    ``accept_changed``: the search then goes on with the grid it started with, whose plan is returned)."""
    if is_remote(results_root):
        return None
    path = Path(results_root) / PLAN_FILE
    text = json.dumps(plan, sort_keys=True, default=str)
    if resume and path.is_file():
        stored = _current_names(path.read_text(encoding="utf-8"))
        if stored != text and accept_changed:
            return json.loads(stored)
        if stored != text:
            before, now = json.loads(stored), json.loads(text)
            changed = sorted(n for n in set(now) | set(before) if now.get(n) != before.get(n))
            digest = hashlib.sha256(stored.encode()).hexdigest()[:12]
            raise ConfigError(f"--resume: the search space of {', '.join(changed) or 'the search'} changed since the "
                              f"search started (stored plan {digest} in {path}); resuming runs the grid it started "
                              "with: pass --accept-changed-space to do that anyway, or --name to start a new search")
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return None


def _current_names(stored: str) -> str:
    """A remembered plan with its backends under their current names (a search started as ``optuna`` resumes as
    ``tpe``)."""
    plan = json.loads(stored)
    if not any(isinstance(p, dict) and canonical(p.get("algorithm", "")) != p.get("algorithm") for p in plan.values()):
        return stored
    for search in plan.values():
        search["algorithm"] = canonical(search["algorithm"])
    return json.dumps(plan, sort_keys=True, default=str)


DATA_FILE = "istar-tune-data.json"
"""In the results folder: the checksum of every data file the search's trials read (compared on ``--resume``)."""


def check_data_files(results_root: str, tasks: list[Task], resume: bool) -> None:
    """On a new search, remember the checksum of each data file of ``tasks``; on ``--resume``, refuse a file whose
    checksum changed since the search started (every trial not yet finished would refuse it, one by one, as a bad
    configuration)."""
    if is_remote(results_root):
        return
    files = {f"task {task.name}'s {split} file {task.split_source(split)}": checksum
             for task in tasks for split, checksum in task.checksums.items()}
    path = Path(results_root) / DATA_FILE
    if resume and path.is_file():
        before = json.loads(path.read_text(encoding="utf-8"))
        changed = [f"{file} ({before[file]}, now {checksum})" for file, checksum in sorted(files.items())
                   if before.get(file, checksum) != checksum]
        if changed:
            raise ConfigError(f"--resume: {'; '.join(changed)} changed since the search started: its unfinished "
                              "trials would refuse the file; restore it, or start a new search on the new data "
                              "(--name NEW)")
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(files, sort_keys=True, indent=1), encoding="utf-8")


def keep_started(planned: dict[str, list[PlannedGroup]], stored: dict[str, Any]) -> None:
    """Trial counts of the plan a search started with (``stored``), for the groups it started with: what a resumed
    Tune experiment runs, whatever the space says now."""
    for name, groups in planned.items():
        counts = {(g["group"], g["after"]): g for g in stored.get(name, {}).get("groups", [])}
        groups[:] = [p for p in groups if (p.group.key, p.after) in counts]
        for p in groups:
            started = counts[(p.group.key, p.after)]
            p.trials, p.tune_trials = started["trials"], started.get("tune_trials")


# ------------------------------------------------------------------------------ the results folder itself


MAX_NAME_CHARS = 100


def validate_name(name: str) -> str:
    """A search name is a folder under the storage path and an MLflow experiment: no path separators, no ``..``."""
    text = str(name).strip()
    if len(text) > MAX_NAME_CHARS or any(ord(c) < 32 or ord(c) == 127 for c in text):
        shown = repr(text[:40] + ("…" if len(text) > 40 else ""))
        raise ConfigError(f"search name {shown} is not usable: at most {MAX_NAME_CHARS} characters, none of them "
                          f"control characters (it names a folder and an MLflow experiment); got {len(text)}")
    if (not text or "/" in text or "\\" in text or text in (".", "..") or ".." in text.split("/")
            or text.startswith("~") or ("'" in text and '"' in text)):
        raise ConfigError(f"search name {name!r} is not usable: give a plain name (letters, digits, '-', '_', '.'; "
                          "no '/', '\\' or '..', not both quote characters)")
    return text


def results_exist(storage_path: str | os.PathLike, name: str) -> bool:
    """Whether a search called ``name`` has Ray results under ``storage_path`` (what ``--resume`` continues)."""
    from ray import tune

    root = storage_root(storage_path)
    if not is_remote(root) and not Path(root, name).is_dir():
        return False
    return bool(tune.Tuner.can_restore(join(root, name)))


def started(results_root: str) -> bool:
    """Whether a search remembered its plan in ``results_root`` (it passed its checks) even if it was stopped before
    Tune saved any state: ``--resume`` then starts its trials."""
    return not is_remote(results_root) and (Path(results_root) / PLAN_FILE).is_file()


def refuse_to_overwrite(results_root: str, resume: bool) -> None:
    if resume or is_remote(results_root):
        return
    if Path(results_root).exists() and any(p.name != PLAN_FILE for p in Path(results_root).iterdir()):
        if _lost(results_root):
            raise ConfigError(_LOST.format(root=results_root))
        raise ConfigError(f"search results already exist in {results_root}: pass --resume (Python: resume=True) to "
                          "continue that search, or --name (name=...) to start a new one")


_LOST = ("the results folder {root} holds trial folders but no search state to continue (it was deleted or emptied "
         "while the search ran): move it away and run the search again, or give --name for a new one; the trials "
         "that finished are in MLflow")
"""What a results folder that lost its state (but not all its trial folders) allows."""


def refuse_nothing_to_resume(storage: str, name: str, results_root: str) -> None:
    """``--resume`` of a search with nothing to continue: no results, or a folder that lost its state (then what
    happened and the way on, not "no results")."""
    if results_exist(storage, name) or started(results_root):
        return
    if _lost(results_root):
        raise ConfigError(_LOST.format(root=results_root))
    raise ConfigError(f"--resume: search {name!r} has no results in {storage} to continue; run it without --resume "
                      "(or check --name and --storage-path)")


def _lost(results_root: str) -> bool:
    """Trial folders without the state Tune and istar-tune keep beside them (deleted while the search ran)."""
    if is_remote(results_root) or not Path(results_root).is_dir():
        return False
    trials = any(p.is_dir() and p.name.startswith("trainable_") for p in Path(results_root).iterdir())
    return trials and not started(results_root) and not _restorable(results_root)


def repair_systemic_errors(results_root: str) -> bool:
    """Before ``--resume``: whether trials ended in an error of the machine (a full disk, a vanished folder: they were
    interrupted, and Tune resumes them only as errored trials, with any others that errored); the empty error files
    a full disk left (which Tune cannot read back) are removed."""
    from istar_tune.search.stopping import systemic_cause

    if is_remote(results_root):
        return False
    systemic = False
    for trial in Path(results_root).iterdir():
        if not trial.is_dir():
            continue
        text = trial / "error.txt"
        if text.is_file():  # an error whose text could not even be written was the disk's
            said = text.read_text(errors="replace")
            systemic = systemic or not said or bool(systemic_cause(said))
        for name in ("error.pkl", "error.txt"):
            path = trial / name
            if path.is_file() and path.stat().st_size == 0:
                path.unlink()
    return systemic


def _restorable(results_root: str) -> bool:
    from ray import tune

    return bool(tune.Tuner.can_restore(results_root))
