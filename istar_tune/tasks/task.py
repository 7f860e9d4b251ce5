"""What a fine-tuning task is: its data (files, or a Hugging Face hub data set), its fields and labels, its problem
type and the metric its trials are ranked by. A task is data, not code: the paper's nine tasks are shipped
definitions (``tasks/paper/*.yaml``) of the same kind a user writes (:mod:`istar_tune.tasks.definition`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

CLASSIFICATION = "classification"
REGRESSION = "regression"
EXTRACTIVE_QA = "extractive_qa"
PROBLEM_TYPES = (CLASSIFICATION, REGRESSION, EXTRACTIVE_QA)

METRICS: dict[str, tuple[str, ...]] = {
    CLASSIFICATION: ("accuracy", "f1", "f1_macro", "mcc"),
    REGRESSION: ("pearson", "spearman"),
    EXTRACTIVE_QA: ("f1", "exact_match"),
}
"""The metrics that fit each problem type (``f1`` of a classification task: binary, the second label positive;
of extractive QA: SQuAD's token F1)."""
DEFAULT_METRIC = {CLASSIFICATION: "accuracy", REGRESSION: "pearson", EXTRACTIVE_QA: "f1"}

DEFAULT_ENCODING = "utf-8"
MAX_CLASSES_SHOWN = 8
"""Class names a task's line shows (then a count of the rest)."""
SPLITS = ("train", "validation")
IN_DEFINITION_FOLDER = "definition"
IN_DATA_FOLDER = "data_dir"
"""Where a definition's relative file paths start: its own folder (a user's definition), or the data folder
(``--data-dir``, the space's ``data_dir``, ``$GLUE_DIR``: the shipped GLUE-layout tasks)."""


@dataclass(frozen=True)
class HubSource:
    """A data set on the Hugging Face hub, read with ``datasets.load_dataset(path, name)``."""

    path: str
    name: str | None = None
    train_split: str = "train"
    validation_split: str = "validation"
    columns: dict[str, str] = field(default_factory=dict)
    """Hub column → the definition's field, where they differ."""


@dataclass(frozen=True)
class GlueLayout:
    """How a GLUE TSV is laid out (``format: glue``)."""

    header: bool = True
    num_columns: int = 0
    """Columns every row must have (a malformed row is reported with its line number)."""
    columns: dict[str, str | int] = field(default_factory=dict)
    """Field → the column holding it (header name, or 0-based index for a file without a header)."""


@dataclass(frozen=True)
class Task:
    """One fine-tuning task (build it from a definition: :func:`istar_tune.tasks.definition.task_from_mapping`)."""

    name: str
    """Short name used on the command line, in search spaces, as the MLflow ``task`` tag (``sst2``, ``tickets``)."""
    display_name: str
    """Name in tables and plots (``SST-2``)."""
    problem_type: str
    """``classification``, ``regression`` or ``extractive_qa``."""
    metric: str
    """The metric trials are ranked by (:data:`METRICS` lists those that fit the problem type)."""
    text_fields: tuple[str, ...] = ()
    """Input text fields, in the order given to the tokenizer (one text or a pair; QA: question, context)."""
    label_field: str = "label"
    """The field holding the label (a class, a score, or QA's answers)."""
    label_names: tuple[str, ...] = ()
    """Class names in label-id order (empty for regression and QA; read from the training split when not given)."""
    label_values: tuple[str, ...] = ()
    """``label_names`` given as a mapping (``{1: World, 2: Sports}``): the label value of each class, in label-id order
    (empty: a label is a class's name, or its index where ``indexed_labels``)."""
    indexed_labels: bool = False
    """The definition listed ``label_names`` (a list): a number in 0..N-1 names the class at that index where the names
    are words (GLUE's 0/1 files with the names negative/positive). Names read from the data never index."""
    drop_labels: tuple[str, ...] = ()
    """Label values whose rows are dropped (a no-consensus placeholder such as ``-``), counted in the task's line."""
    unanswerable: bool = False
    """Extractive QA with questions that have no answer (SQuAD v2): they train towards the null answer at [CLS] and
    are scored by the official v2 rules. Set when the data is read (a question without an answer), or given."""
    column_names: tuple[str, ...] = ()
    """The columns of a headerless csv/tsv file, in order (empty: the first row is the header)."""
    separator: str = ""
    """A csv-style file's one-character separator (empty: the format's own, a comma or a tab)."""
    excel_separator_line: bool = field(default=False, compare=False)
    """Once read: the file's first line is Excel's ``sep=X``, naming the separator (skipped, not a header)."""
    dropped: tuple[int, int] = (0, 0)
    """Once read: the training and validation rows dropped by ``drop_labels``."""
    leaked: int = field(default=0, compare=False)
    """Once read: validation rows whose input is a training row's too (counted in the task's line)."""
    answers_beyond_windows: int = field(default=0, compare=False)
    """Once encoded (extractive QA): training questions whose answer no window holds whole; they train as "no answer"
    (the task's line counts them: raise the window to train them)."""
    answers_stripped: int = 0
    """Once read (extractive QA): answers read without the whitespace around their text, at the offset moved past
    it (the task's line counts them)."""
    class_counts: tuple[int, ...] = field(default=(), compare=False)
    """Once read (classification): the training examples of each class, in id order (the task's line shows them)."""
    score_range: tuple[float, float] | None = None
    """Regression: the scale of the scores (STS-B: 0 to 5); a score outside it is refused as bad data."""
    format: str = ""
    """A registered format's name (:mod:`istar_tune.data.registry`; empty: a hub-only task)."""
    files: dict[str, str | list[str] | dict[str, str]] = field(default_factory=dict)
    """Split → file: absolute, or relative to the data folder when ``files_in`` is ``data_dir``; a split in parts: a
    list of files, read in order and joined (a pattern's matches, in name order, once the definition is read);
    parallel files: a mapping of field to file. With ``validation_split``: the train file alone."""
    validation_split: float = 0.0
    """One file as both splits: the share of its rows (below 1) or their count (1 or more) drawn as the validation
    split, seeded by ``split_seed``, class-stratified for a classification (0: a validation file is given)."""
    split_seed: int = 0
    split_field: str = ""
    """One file with a column naming each row's split (the authors' own split): that column (empty: none)."""
    split_values: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """With ``split_field``: each split's values; a row whose value is none of them is left out and counted."""
    left_out: tuple[tuple[str, int], ...] = field(default=(), compare=False)
    """Once read with ``split_field``: each other value and its rows, left out (the task's line counts them)."""
    files_in: str = IN_DEFINITION_FOLDER
    glue: GlueLayout | None = None
    hub: HubSource | None = None
    """The hub data set (a shipped task: used when no data folder is given)."""
    train_examples: int = 0
    """Training examples (the cost model and the simulator; 0: not known until the data is read)."""
    eval_examples: int = 0
    checksums: dict[str, str] = field(default_factory=dict)
    """Split → ``sha256:<hex>`` of its file (or ``hub:<fingerprint>``), recorded when the definition is resolved and
    verified wherever the data is read again."""
    source: str = ""
    """Where the definition came from (a file, a search space, ``shipped``)."""
    shipped: bool = False
    encoding: str = DEFAULT_ENCODING
    """The text encoding of csv, tsv and json files."""
    positive_label: str = ""
    """With ``metric: f1`` on a classification: the class whose F1 is reported (a definition must name it)."""
    infer_problem_type: bool = False
    """The definition states no problem type (nor a metric, class names or a scale that imply one): reading the data
    decides it, then the metric is that type's default."""
    inferred: str = ""
    """How the data decided the problem type, once read (for the task's line: "labels are numbers with decimals")."""
    observed_scores: tuple[float, float] | None = None
    """Regression, once read: the lowest and highest training score."""
    read_examples: tuple[int, int] | None = field(default=None, compare=False)
    """Once read: the training and validation examples the data holds, or the rows a cut keeps (a shipped task keeps
    the published sizes in ``train_examples``/``eval_examples``, for the cost model, while its data may be a
    subset)."""
    cut: str = field(default="", compare=False)
    """Once read with ``max_train_samples``/``max_eval_samples``: what the cut kept, in words (the task's line says
    it; ``read_examples`` and ``class_counts`` are then the rows kept)."""

    @property
    def num_labels(self) -> int:
        return 1 if self.problem_type == REGRESSION else len(self.label_names)

    @property
    def positive_index(self) -> int:
        """The class index a binary F1 is of: ``positive_label``'s, else the second (GLUE's MRPC and QQP)."""
        return self.label_names.index(self.positive_label) if self.positive_label in self.label_names else 1

    @property
    def metric_text(self) -> str:
        """The metric as tables name it: ``f1`` of a classification says its class (``f1 of 'equivalent'``)."""
        if self.metric == "f1" and self.problem_type == CLASSIFICATION and self.positive_label:
            return f"f1 of {self.positive_label!r}"
        return self.metric

    @property
    def metrics(self) -> tuple[str, ...]:
        """Every metric the task reports, the selection metric first."""
        if self.problem_type == EXTRACTIVE_QA:
            return (self.metric, *[m for m in METRICS[EXTRACTIVE_QA] if m != self.metric])
        return (self.metric,)

    @property
    def resolved(self) -> bool:
        """Whether what trials and the cost model need is known without reading the data: the class names and
        the split sizes."""
        labels = self.problem_type != CLASSIFICATION or bool(self.label_names)
        return labels and not self.infer_problem_type and self.train_examples > 0 and self.eval_examples > 0

    def split_source(self, split: str) -> str:
        """Where a split's data is, in words: its file, its parallel files, the train file's drawn share, or ""."""
        given = self.files.get("train" if self.validation_split else split)
        if isinstance(given, dict):
            given = ", ".join(given.values())
        elif isinstance(given, list):
            given = " + ".join(given)
        if given and self.validation_split and split != "train":
            return f"{given} (validation_split {self.validation_split:g}, split_seed {self.split_seed})"
        return given or ""

    def describe(self) -> str:
        """One line of what a run trains on: the input fields, the label field, the problem type, the classes (each
        with its training examples, once read; or the scores' range), the example counts."""
        fields = " + ".join(self.text_fields) or "(not read yet)"
        kind = self.problem_type + (f" ({self.inferred})" if self.inferred else "")
        if self.problem_type == CLASSIFICATION:
            counts = self.class_counts if len(self.class_counts) == len(self.label_names) else ()
            shown = ", ".join(f"{name} ({counts[i]:,})" if counts else name
                              for i, name in enumerate(self.label_names[:MAX_CLASSES_SHOWN]))
            more = f", … {len(self.label_names) - MAX_CLASSES_SHOWN} more" if len(
                self.label_names) > MAX_CLASSES_SHOWN else ""
            kind += f", {len(self.label_names)} classes: {shown}{more}" if self.label_names else ""
            kind += f"; metric {self.metric_text}" if self.metric_text != self.metric else ""
        elif self.problem_type == REGRESSION:
            low_high = self.observed_scores or self.score_range
            kind += f", scores {low_high[0]:g} to {low_high[1]:g}" if low_high else ""
            kind += f" (scale {self.score_range[0]:g} to {self.score_range[1]:g})" if (
                self.score_range and self.observed_scores) else ""
            kind += " (trained as z-scores)" if low_high else ""
        sizes = (f"; {self.train_examples:,} train / {self.eval_examples:,} validation examples"
                 if self.train_examples and self.eval_examples else "")
        if self.cut:
            sizes = f"; {self.read_examples[0]:,} train / {self.read_examples[1]:,} validation examples ({self.cut})"
        elif self.read_examples and self.read_examples != (self.train_examples, self.eval_examples):
            sizes = (f"; {self.read_examples[0]:,} train / {self.read_examples[1]:,} validation examples read "
                     f"(published: {self.train_examples:,} / {self.eval_examples:,})")
        if self.problem_type == EXTRACTIVE_QA and self.unanswerable:
            kind += " with unanswerable questions (SQuAD v2: trained towards the null answer, scored by the v2 rules)"
        if self.left_out:
            sizes += "; rows of other splits left out: " + ", ".join(f"{v} {n:,}" for v, n in self.left_out)
        if self.leaked:
            sizes += f"; validation rows whose input is also a training row's: {self.leaked:,}"
        if self.answers_beyond_windows:
            sizes += (f"; answers longer than every window (trained as no answer; raise max_length): "
                      f"{self.answers_beyond_windows:,}")
        if self.answers_stripped:
            sizes += f"; answers stripped of surrounding spaces: {self.answers_stripped:,}"
        if any(self.dropped):
            sizes += (f"; {self.dropped[0]:,} train / {self.dropped[1]:,} validation rows dropped (drop_labels: "
                      f"{', '.join(self.drop_labels)})")
        return f"task {self.name}: input {fields}; label {self.label_field}; {kind}{sizes}"

