"""Tracking: where results go (``storage``) and MLflow, the record of every search (no Ray, no torch).

One experiment per search name, a parent run per search (per shard of a job array), a child run per trial.
``store`` holds the tags, the store checks and the queries; ``template`` makes a new sqlite store a copy of an empty
one; ``naming`` says what a trial's run is called and logs; ``datasets`` what it trained and was scored on (MLflow's
dataset inputs); ``writer`` is the background writer a search feeds, ``earlier`` the runs an earlier driver left
(found again, or taken over); ``runs`` reads the trials back for tables, plots, ``status`` and the seeds stage. The
names below are the package's API (``tracking.trial_runs``, ``tracking.TAG_ROLE``, ...); each lives in exactly one of
those modules.
"""

from istar_tune.tracking.datasets import dataset_inputs
from istar_tune.tracking.datasets import describe as describe_datasets
from istar_tune.tracking.naming import (
    SETTING_PREFIX,
    configuration_words,
    error_summary,
    logged_params,
    resolved_hyperparameters,
    run_name,
    train_config,
    trial_error_text,
)
from istar_tune.tracking.runs import (
    NoExperiment,
    TrialRun,
    best_trials,
    get_experiment,
    logged_models,
    run_task,
    run_tasks,
    task_of,
    trial_runs,
)
from istar_tune.tracking.store import (
    COUNTED_STATUSES,
    EXPERIMENT_KIND_TAG,
    MAX_TAG_CHARS,
    MODEL_TRAINING,
    NOTE_TAG,
    PAGE_SIZE,
    PLAN_TOTAL,
    SCHEMES,
    SEED_AGGREGATES,
    STATUSES,
    TAG_CHOSEN,
    TAG_CHOSEN_BY,
    TAG_COMMIT,
    TAG_ERROR,
    TAG_GROUP,
    TAG_NODE,
    TAG_PARENT,
    TAG_PLAN,
    TAG_REPLAY,
    TAG_RESTORED_FROM,
    TAG_ROLE,
    TAG_SEARCH,
    TAG_SEARCH_RUN,
    TAG_SHARD,
    TAG_SIMULATED,
    TAG_SLURM_JOB,
    TAG_SPACE,
    TAG_STAGE,
    TAG_STATUS,
    TAG_STRATEGY,
    TAG_TASK,
    TAG_TASK_FILES,
    TAG_TRAINED_BY,
    TAG_TRIAL_ID,
    TASKS_FOLDER,
    check_reachable,
    check_store,
    check_writable,
    client,
    decode_plan,
    encode_plan,
    ended_status,
    ensure_experiment,
    find_runs,
    git_commit,
    parent_run,
    planned_groups,
    prepare_store,
    quote,
    record_plan,
    store_lock,
)
from istar_tune.tracking.writer import RunWriter

__all__ = [
    "dataset_inputs", "describe_datasets",
    "COUNTED_STATUSES", "EXPERIMENT_KIND_TAG", "MAX_TAG_CHARS", "MODEL_TRAINING", "NOTE_TAG", "PAGE_SIZE",
    "PLAN_TOTAL", "RunWriter",
    "SCHEMES", "SEED_AGGREGATES", "STATUSES",
    "TAG_CHOSEN", "TAG_CHOSEN_BY", "TAG_COMMIT", "TAG_ERROR", "TAG_GROUP", "TAG_NODE", "TAG_PARENT", "TAG_PLAN",
    "TAG_REPLAY",
    "TAG_RESTORED_FROM", "TAG_STRATEGY", "TASKS_FOLDER",
    "TAG_ROLE", "TAG_SEARCH_RUN", "TAG_SHARD", "TAG_SLURM_JOB",
    "TAG_SEARCH", "TAG_SIMULATED", "TAG_SPACE", "TAG_STAGE", "TAG_STATUS", "TAG_TASK", "TAG_TASK_FILES",
    "TAG_TRAINED_BY", "TAG_TRIAL_ID", "TrialRun",
    "best_trials", "check_reachable", "check_store", "check_writable", "client", "decode_plan", "encode_plan",
    "ended_status", "ensure_experiment", "error_summary", "find_runs", "get_experiment", "git_commit",
    "parent_run", "planned_groups", "prepare_store", "quote", "store_lock", "record_plan", "resolved_hyperparameters",
    "train_config",
    "NoExperiment", "run_task", "run_tasks", "task_of", "trial_error_text", "trial_runs", "SETTING_PREFIX",
    "configuration_words", "logged_models", "logged_params", "run_name",
]
