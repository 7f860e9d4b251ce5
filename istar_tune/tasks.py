"""The nine tasks of the I-STAR paper: where their files are, their fields, labels, problem type and metric.

Everything task-specific lives in the :data:`TASKS` table; no other module names a task.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from istar_tune.errors import ConfigError

CLASSIFICATION = "classification"
REGRESSION = "regression"
EXTRACTIVE_QA = "extractive_qa"


@dataclass(frozen=True)
class Task:
    """One fine-tuning task."""

    name: str
    """Short name used on the command line and in search spaces (``sst2``)."""
    display_name: str
    """Name as the paper writes it (``SST-2``); also the folder in the GLUE layout."""
    problem_type: str
    """``classification``, ``regression`` or ``extractive_qa``."""
    metric: str
    """The paper's metric, the key the best trial is chosen by: ``accuracy``, ``mcc``, ``pearson`` or ``f1``."""
    text_fields: tuple[str, ...] = ()
    """Input text columns, in the order they are given to the tokenizer (one sentence or a pair)."""
    label_names: tuple[str, ...] = ()
    """Class names in label-id order (empty for regression and QA)."""
    file_format: str = "tsv"
    """``tsv`` (GLUE), ``ptb`` (Stanford sentiment trees) or ``squad`` (SQuAD v1.1 JSON)."""
    files: dict[str, str] = field(default_factory=lambda: {"train": "train.tsv", "validation": "dev.tsv"})
    """File name of each split inside the task's folder."""
    header: bool = True
    """Whether the TSV starts with a header row."""
    num_columns: int = 0
    """Columns every TSV row must have (a malformed row is reported with its line number)."""
    columns: dict[str, str | int] = field(default_factory=dict)
    """Our field name → the TSV column holding it (header name, or 0-based index for files without a header)."""
    hub: tuple[str, str | None] = ("", None)
    """(dataset id, config name) on the Hugging Face hub, used when no data directory is given."""
    hub_splits: dict[str, str] = field(default_factory=lambda: {"train": "train", "validation": "validation"})
    hub_columns: dict[str, str] = field(default_factory=dict)
    """Hub column name → our field name, where they differ."""
    train_examples: int = 0
    """Examples of the full published training set (to plan and simulate trials; the data read may be smaller)."""
    eval_examples: int = 0
    """Examples of the full published validation set."""

    @property
    def num_labels(self) -> int:
        return 1 if self.problem_type == REGRESSION else len(self.label_names)

    @property
    def metrics(self) -> tuple[str, ...]:
        """Every metric the task reports, the selection metric first."""
        return ("f1", "exact_match") if self.problem_type == EXTRACTIVE_QA else (self.metric,)


def _glue(name, display, fields, columns, num_columns, sizes, labels=("0", "1"), metric="accuracy", header=True,
          hub=None, problem_type=CLASSIFICATION):
    return Task(name=name, display_name=display, problem_type=problem_type, metric=metric, text_fields=fields,
                label_names=labels, header=header, num_columns=num_columns, columns=columns,
                hub=("nyu-mll/glue", hub or name), train_examples=sizes[0], eval_examples=sizes[1])


TASKS: dict[str, Task] = {
    task.name: task
    for task in (
        _glue("sst2", "SST-2", ("sentence",), {"sentence": "sentence", "label": "label"}, 2, (67_349, 872),
              labels=("negative", "positive")),
        _glue("qnli", "QNLI", ("question", "sentence"),
              {"question": "question", "sentence": "sentence", "label": "label"}, 4, (104_743, 5_463),
              labels=("entailment", "not_entailment")),
        _glue("rte", "RTE", ("sentence1", "sentence2"),
              {"sentence1": "sentence1", "sentence2": "sentence2", "label": "label"}, 4, (2_490, 277),
              labels=("entailment", "not_entailment")),
        _glue("mrpc", "MRPC", ("sentence1", "sentence2"),
              {"sentence1": "#1 String", "sentence2": "#2 String", "label": "Quality"}, 5, (3_668, 408),
              labels=("not_equivalent", "equivalent")),
        _glue("qqp", "QQP", ("question1", "question2"),
              {"question1": "question1", "question2": "question2", "label": "is_duplicate"}, 6, (363_846, 40_430),
              labels=("not_duplicate", "duplicate")),
        _glue("cola", "CoLA", ("sentence",), {"sentence": 3, "label": 1}, 4, (8_551, 1_043),
              labels=("unacceptable", "acceptable"),
              metric="mcc", header=False),
        _glue("stsb", "STS-B", ("sentence1", "sentence2"),
              {"sentence1": "sentence1", "sentence2": "sentence2", "label": "score"}, 10, (5_749, 1_500), labels=(),
              metric="pearson", problem_type=REGRESSION),
        Task(name="sst5", display_name="SST-5", problem_type=CLASSIFICATION, metric="accuracy",
             text_fields=("sentence",),
             label_names=("very negative", "negative", "neutral", "positive", "very positive"),
             file_format="ptb", files={"train": "train.txt", "validation": "dev.txt"}, hub=("SetFit/sst5", None),
             hub_columns={"text": "sentence"}, train_examples=8_544, eval_examples=1_101),
        Task(name="squad", display_name="SQuAD", problem_type=EXTRACTIVE_QA, metric="f1",
             text_fields=("question", "context"), file_format="squad",
             files={"train": "train-v1.1.json", "validation": "dev-v1.1.json"}, hub=("rajpurkar/squad", None),
             train_examples=87_599, eval_examples=10_570),
    )
}

_ALIASES = {alias: task.name for task in TASKS.values()
            for alias in (task.name, task.display_name.lower(), task.display_name.lower().replace("-", ""))}


def get_task(name: str) -> Task:
    """The task called ``name`` (case-insensitive; ``sst2``, ``SST-2`` and ``sst-2`` are the same)."""
    key = _ALIASES.get(str(name).strip().lower())
    if key is None:
        raise ConfigError(f"unknown task {name!r}: choose one of {', '.join(TASKS)}")
    return TASKS[key]
