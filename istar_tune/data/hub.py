"""A task read from a Hugging Face hub data set (``hub:``): its two splits, columns renamed to the definition's
fields; a hub that cannot be reached is one line naming the offline way out."""

from __future__ import annotations

from istar_tune.errors import DataError
from istar_tune.tasks.data_folder import GLUE_DIR_ENV
from istar_tune.tasks.task import Task


def read_hub(task: Task) -> dict:
    """The task's train and validation splits from the hub, as tables."""
    import datasets

    hub = task.hub
    try:
        loaded = datasets.load_dataset(hub.path, hub.name)
    except Exception as err:  # noqa: BLE001 — any hub failure becomes one actionable line
        raise DataError(f"cannot load {task.display_name} from the Hugging Face hub ({hub.path}"
                        f"{'/' + hub.name if hub.name else ''}): {type(err).__name__}; pass --data-dir DIR or set "
                        f"{GLUE_DIR_ENV} to a folder in the GLUE layout, or give the task's files") from None
    splits = {}
    for split, name in (("train", hub.train_split), ("validation", hub.validation_split)):
        if name not in loaded:
            raise DataError(f"{task.source}: hub data set {hub.path} has no split {name!r} (it has "
                            f"{', '.join(loaded)}): set hub.{split}_split")
        data = loaded[name]
        for hub_name, ours in hub.columns.items():
            data = data.rename_column(hub_name, ours)
        splits[split] = data
    return splits
