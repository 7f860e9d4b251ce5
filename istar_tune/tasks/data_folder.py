"""Where the shipped tasks' files come from, by one rule everywhere (no ``datasets`` import: the search driver reads
it too): ``--data-dir``, else a search space's ``data_dir``, else ``$GLUE_DIR``, else the Hugging Face hub; and what
kind of file a ``.json`` is (SQuAD's nested layout, or rows)."""

from __future__ import annotations

import os
from pathlib import Path

from istar_tune.errors import DataError

GLUE_DIR_ENV = "GLUE_DIR"


def resolve_data_dir(data_dir: str | os.PathLike | None, space_value: str | os.PathLike | None = None) -> Path | None:
    """The data folder, by one rule everywhere: ``data_dir`` (the flag), else ``space_value`` (a search space's
    ``data_dir``), else ``$GLUE_DIR``, else ``None`` (the Hugging Face hub)."""
    for chosen, source in ((data_dir, "--data-dir"), (space_value, "the search space's data_dir"),
                           (os.environ.get(GLUE_DIR_ENV), f"${GLUE_DIR_ENV}")):
        if chosen in (None, ""):
            continue
        path = Path(chosen).expanduser()
        if not path.is_dir():
            what = "is a file, not a folder" if path.is_file() else "does not exist"
            raise DataError(f"data directory {str(path)!r} (from {source}) {what}: point it at a folder in the GLUE "
                            "layout (SST-2/train.tsv, RTE/dev.tsv, ...: what download_glue_data.py writes)")
        return path
    return None


def hub_reachable(timeout: float = 5.0) -> bool:
    """Whether the Hugging Face hub answers (False at once when HF_HUB_OFFLINE or HF_DATASETS_OFFLINE is set)."""
    import urllib.error
    import urllib.request

    if any(os.environ.get(v, "").lower() in ("1", "true", "yes") for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")):
        return False
    try:
        urllib.request.urlopen(urllib.request.Request("https://huggingface.co", method="HEAD"), timeout=timeout)
    except urllib.error.HTTPError:
        return True  # it answered
    except OSError:
        return False
    return True
