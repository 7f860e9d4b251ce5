"""A search trial's checkpoints in the storage folder: the trial keeps only its latest few, and resumes from the
newest one that can be read.

Tune is told to keep every checkpoint (``num_to_keep=None``): with a limit, Tune forces an experiment snapshot each
time a trial reaches it, and a snapshot writes the state of every trial (about 20 KB each), which at thousands of
trials would stall the driver. So the trial prunes its own older checkpoints after each report, through the
storage's filesystem (local folder or cloud bucket alike). If a driver died with a snapshot naming a checkpoint
that was pruned since, or a checkpoint is unreadable, the trial resumes from the newest readable one instead.
Works in the trial process only (it reads Tune's trial context); imports neither torch nor the training code.
"""

from __future__ import annotations

import logging
import re
import tempfile
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

_CHECKPOINT = re.compile(r"^checkpoint_(\d+)$")


def _storage():
    from ray import tune

    return tune.get_context().get_storage()


READ_RECORD = "read.json"
"""A trial's record of what it read, written to its folder in storage as it reads its data (before its first epoch):
its splits, described for MLflow's dataset inputs, and its node. The driver reads it back for a trial that ends
before its first report (a signal, the OOM killer, an error), so that FAILED run still says what it read and where;
plain JSON, so nothing of Ray's is unpickled to get it."""


def write_read_record(record: dict) -> None:
    """Write :data:`READ_RECORD` for this trial (written whole or not at all; never a reason to fail the trial)."""
    import json

    try:
        storage = _storage()
        filesystem, folder = storage.storage_filesystem, storage.trial_fs_path
        filesystem.create_dir(folder, recursive=True)
        with filesystem.open_output_stream(f"{folder}/{READ_RECORD}.part") as stream:
            stream.write(json.dumps(record).encode("utf-8"))
        filesystem.move(f"{folder}/{READ_RECORD}.part", f"{folder}/{READ_RECORD}")
    except Exception as err:  # noqa: BLE001 - a record for MLflow, never a reason to fail a trial
        log.warning("could not record what the trial read: %s", err)


def _listed() -> list[tuple[int, str]]:
    """(index, fs path) of this trial's checkpoint folders in storage, oldest first."""
    import pyarrow.fs

    storage = _storage()
    selector = pyarrow.fs.FileSelector(storage.trial_fs_path, allow_not_found=True)
    found = []
    for info in storage.storage_filesystem.get_file_info(selector):
        match = _CHECKPOINT.match(info.base_name)
        if match and info.type == pyarrow.fs.FileType.Directory:
            found.append((int(match.group(1)), info.path))
    return sorted(found)


def prune(keep: int) -> None:
    """Delete all but the newest ``keep`` checkpoint folders of this trial (after a report registered one)."""
    try:
        listed = _listed()
        filesystem = _storage().storage_filesystem
        for _, path in listed[:-keep] if keep > 0 else listed:
            filesystem.delete_dir(path)
    except Exception as err:  # noqa: BLE001 - pruning is economy, never a reason to fail a trial
        log.warning("could not prune old checkpoints: %s", err)


def restore(checkpoint, load: Callable[[Path], object]) -> tuple[object | None, str]:
    """``load(folder)`` of the newest readable checkpoint: the one Tune gives first, else the trial's others from
    newest to oldest. Returns (what ``load`` returned or None, a note when it was not Tune's)."""
    problems = []
    if checkpoint is not None:
        try:
            with checkpoint.as_directory() as folder:
                return load(Path(folder)), ""
        except Exception as err:  # noqa: BLE001 - missing, truncated or unreadable: try an older one
            problems.append(f"{Path(checkpoint.path).name}: {type(err).__name__}: {err}")
    try:
        listed = _listed()
    except Exception:  # noqa: BLE001 - outside a Tune trial there is nothing else to try
        listed = []
    import pyarrow.fs

    given = str(getattr(checkpoint, "path", ""))
    for _, path in reversed(listed):
        if path.rstrip("/") == given.rstrip("/"):
            continue
        try:
            with tempfile.TemporaryDirectory(prefix="istar-restore-") as local:
                pyarrow.fs.copy_files(path, local, source_filesystem=_storage().storage_filesystem,
                                      destination_filesystem=pyarrow.fs.LocalFileSystem())
                value = load(Path(local))
            note = f"resumed from {Path(path).name} because {'; '.join(problems) or 'the given one is missing'}"
            log.warning(note)
            return value, note
        except Exception as err:  # noqa: BLE001
            problems.append(f"{Path(path).name}: {type(err).__name__}: {err}")
    if problems:
        log.warning("no readable checkpoint (%s): the trial starts over", "; ".join(problems))
        return None, "no readable checkpoint: started over (" + "; ".join(problems)[:500] + ")"
    return None, ""
