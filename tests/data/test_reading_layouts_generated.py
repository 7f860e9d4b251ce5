"""Generated files the way users' files come: delimited by hand with any of five separators (cells quoted as RFC 4180
says, a field too many or too few in some row), JSON Lines written raw with Unicode's line separators inside strings,
files sorted by label and cut by a limit, QA answers padded with spaces, class codes spelled as exports and locales
write numbers, one class name spelled across Unicode's categories and normal forms, definitions' YAML 1.1 scalars
(octal-looking codes, booleans as class names), exports concatenated with their header again. Each expected outcome
is written from the rule's text in docs/tasks.md (no helper of the package is used to compute it): a reading equal to
it, or a refusal in one line that names the cause. ``make fuzz`` runs 400 examples a test, CI 15."""

from __future__ import annotations

import json
import os
import unicodedata

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from istar_tune.data.reading import read_task
from istar_tune.errors import IstarTuneError
from istar_tune.tasks import task_of

FUZZ = os.environ.get("HYPOTHESIS_PROFILE") == "fuzz"
GENERATED = settings(max_examples=400 if FUZZ else 15, deadline=None, derandomize=not FUZZ,
                     suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
"""15 examples a test, the same every run (CI); 400 drawn anew with ``HYPOTHESIS_PROFILE=fuzz`` (``make fuzz``)."""

SEPARATORS = [",", ";", "|", "@", "\t"]
LABELS = ["neg", "pos", "mid"]
ODD_CHARACTERS = ",;|@\"' \u00a0\u200b\u2028\u2029\u0085é"
"""Characters users' cells hold: every separator, quotes, a no-break and a zero-width space, Unicode line
separators, an accented letter."""
CELL = st.text(alphabet=st.sampled_from(list("abc xyz") + list(ODD_CHARACTERS)), min_size=0, max_size=12)


def _read(folder, definition: dict):
    try:
        return read_task(task_of({"name": "generated", "text_fields": ["text"], **definition}, folder))
    except IstarTuneError as err:
        return err


def _one_line(err: IstarTuneError) -> list[str]:
    problems = getattr(err, "problems", None) or [str(err)]
    assert problems and all("\n" not in p and p.strip() and "Traceback" not in p for p in problems), problems
    return problems


def _cell(text: str, separator: str) -> str:
    """A csv-style cell as RFC 4180 writes it: quoted (quotes doubled) where it holds the separator or a quote; a
    tab-separated file is written unquoted."""
    if separator == "\t" or not (separator in text or '"' in text):
        return text
    return '"' + text.replace('"', '""') + '"'


@st.composite
def delimited(draw):
    """A file's separator, rows of (text, label), and the rows given a field too many or too few."""
    separator = draw(st.sampled_from(SEPARATORS))
    cells = CELL.filter(lambda t: "\t" not in t) if separator == "\t" else CELL
    size = draw(st.integers(4, 9))
    rows = [("t" + draw(cells), draw(st.sampled_from(LABELS[:2] if i < 2 else LABELS))) for i in range(size)]
    rows[0], rows[1] = (rows[0][0], "neg"), (rows[1][0], "pos")  # two classes at least
    broken = sorted(draw(st.sets(st.integers(0, size - 1), max_size=2)))
    return separator, rows, {row: draw(st.sampled_from(["more", "fewer"])) for row in broken}


@pytest.mark.parametrize("split", ["train", "validation"])
@GENERATED
@given(case=delimited())
def test_a_delimited_file_is_read_cell_for_cell_or_a_row_with_other_fields_is_refused(split, case, tmp_path_factory):
    separator, rows, broken = case
    folder = tmp_path_factory.mktemp("delimited")
    lines = ["text" + separator + "label"]
    for i, (text, label) in enumerate(rows):
        cells = [_cell(text, separator), label]
        if broken.get(i) == "more":
            cells.append("extra")
        elif broken.get(i) == "fewer":
            cells = [cells[0]]
        lines.append(separator.join(cells))
    good = "text" + separator + "label\n" + "".join(_cell(t, separator) + separator + lab + "\n" for t, lab in rows)
    written = "\n".join(lines) + "\n"
    (folder / "train.txt").write_text(written if split == "train" else good, encoding="utf-8")
    (folder / "dev.txt").write_text(written if split == "validation" else good, encoding="utf-8")
    definition = {"train": "train.txt", "validation": "dev.txt",
                  **({"format": "tsv"} if separator == "\t" else {"separator": separator})}
    outcome = _read(folder, definition)
    if broken:  # the rule: every row has as many fields as the header, else refused naming the rows
        assert isinstance(outcome, IstarTuneError), (written, outcome)
        [line] = _one_line(outcome)
        shown = ", ".join(str(row + 1) for row in broken)
        assert f"rows {shown}: " in line and "where the header has 2" in line, line
        return
    assert not isinstance(outcome, Exception), (written, outcome)
    task, splits = outcome
    names = sorted({label for _, label in rows})
    assert task.label_names == tuple(names)
    assert splits["train"]["text"] == [t for t, _ in rows]  # each cell as written, odd characters and all
    assert splits["train"]["label"] == [names.index(label) for _, label in rows]


@GENERATED
@given(texts=st.lists(CELL, min_size=4, max_size=8), placeholder=st.sampled_from([None, "-", "?", "n/a", ""]),
       at=st.integers(0, 7))
def test_json_lines_split_at_newlines_only_and_a_placeholder_among_numbers_stays_refused(texts, placeholder, at,
                                                                                         tmp_path_factory):
    labels: list = [i % 2 for i in range(len(texts))]
    if placeholder is not None:
        labels[at % len(labels)] = placeholder
    rows = [{"text": "t" + text, "label": label} for text, label in zip(texts, labels)]
    folder = tmp_path_factory.mktemp("jsonl")
    for name in ("train", "dev"):  # written raw: U+2028, U+2029 and U+0085 inside strings, as ensure_ascii=False does
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                                              encoding="utf-8")
    outcome = _read(folder, {"train": "train.jsonl", "validation": "dev.jsonl"})
    if placeholder is not None:  # the rule: a placeholder is not a label (never class 0)
        assert isinstance(outcome, IstarTuneError), outcome
        assert any("is not a label" in line for line in _one_line(outcome))
        return
    assert not isinstance(outcome, Exception), outcome
    assert outcome[1]["train"]["text"] == [r["text"] for r in rows]
    assert outcome[1]["train"]["label"] == labels


@GENERATED
@given(labels=st.lists(st.sampled_from(["neg", "pos"]), min_size=4, max_size=12), order=st.booleans(),
       limit=st.integers(1, 12))
def test_what_a_limit_keeps_has_two_classes_or_is_refused_naming_the_limit(labels, order, limit, tmp_path_factory):
    labels = sorted(labels) if order else labels
    folder = tmp_path_factory.mktemp("cut")
    (folder / "train.csv").write_text("text,label\n" + "".join(f"row {i},{lab}\n" for i, lab in enumerate(labels)))
    (folder / "dev.csv").write_text("text,label\nx,neg\ny,pos\n")
    try:
        outcome = read_task(task_of({"name": "cut", "train": "train.csv", "validation": "dev.csv"}, folder),
                            max_train_samples=limit)
    except IstarTuneError as err:
        outcome = err
    whole, kept = set(labels), set(labels[:limit])
    if len(whole) < 2:  # the rule: one training class is refused, cut or not (and so is a dev class it never shows)
        assert isinstance(outcome, IstarTuneError), outcome
        _one_line(outcome)
    elif len(kept) < 2:
        assert isinstance(outcome, IstarTuneError), outcome
        [line] = _one_line(outcome)
        assert f"the first {limit} rows (max_train_samples {limit}): every training label is" in line
    else:
        assert not isinstance(outcome, Exception), outcome
        assert len(outcome[1]["train"]) == min(limit, len(labels))


PADS = ["", " ", "\u00a0", "\t", "\r\n", "  "]
"""Whitespace a corpus' answers carry around their text: spaces, a no-break space, a tab, CR/LF."""


@GENERATED
@given(words=st.lists(st.sampled_from(["alpha", "beta", "gamma", "delta"]), min_size=5, max_size=9),
       pads=st.lists(st.tuples(st.sampled_from(PADS), st.sampled_from(PADS), st.booleans()), min_size=3, max_size=3))
def test_a_padded_answer_reads_stripped_at_the_moved_offset_and_is_counted(words, pads, tmp_path_factory):
    """The rule (docs/tasks.md): an answer's surrounding whitespace is not the answer; its offset, given at the padded
    text or at the bare one, is moved to where the context holds the bare text; the task's line counts them."""
    context = " ".join(words)
    rows, bare = [], []
    for i, (before, after, offset_at_padded) in enumerate(pads):
        start = len(" ".join(words[:i + 1])) + 1  # word i + 1, after a space
        bare.append({"text": [words[i + 1]], "answer_start": [start]})
        text = before + words[i + 1] + after
        rows.append({"id": f"q{i}", "question": "which?", "context": context,
                     "answers": {"text": [text], "answer_start": [start - len(before) if offset_at_padded else start]}})
    folder = tmp_path_factory.mktemp("qa")
    for name in ("train", "dev"):
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    outcome = _read(folder, {"train": "train.jsonl", "validation": "dev.jsonl", "problem_type": "extractive_qa",
                             "text_fields": ["question", "context"]})
    padded = sum(before + after != "" for before, after, _ in pads)
    assert not isinstance(outcome, Exception), outcome
    assert outcome[1]["train"]["answers"] == bare
    assert outcome[0].answers_stripped == 2 * padded
    assert (f"answers stripped of surrounding spaces: {2 * padded}" in outcome[0].describe()) == bool(padded)


BIG = 2**53
"""Codes past it are where a float would merge two integers."""


@st.composite
def spelled_numbers(draw):
    """Class codes as users' files spell them (a leading zero or plus, ``.0``, an exponent, integers past 2^53), some
    rows decorated as locales and reports write numbers (a decimal comma, a thousands separator, a percent sign, a
    unit)."""
    base = draw(st.sampled_from([0, BIG]))
    codes = draw(st.lists(st.integers(0, 4), min_size=4, max_size=10))
    bare = [lambda k: str(k), lambda k: f"0{k}", lambda k: f"+{k}"]
    if base == 0:
        bare += [lambda k: f"{k}.0", lambda k: f"{k}e0", lambda k: f"{k}.00"]
    spelled = []
    for code in codes:
        pool = DECORATED if draw(st.integers(0, 9)) == 0 else bare
        spelled.append((base + code, draw(st.sampled_from(pool))(base + code), pool is DECORATED))
    return spelled


DECORATED = [lambda k: f"{k},5", lambda k: f"{k},000", lambda k: f"{k}%", lambda k: f"{k} stars",
             lambda k: f"{k}.5 pts", lambda k: f"${k}.50", lambda k: f"{k},50 €", lambda k: f"€{k}",
             lambda k: f"£ {k}", lambda k: f"{k}.0°C", lambda k: f"{k} °F", lambda k: f"{k}★", lambda k: f"{k}/5",
             lambda k: f"{k}½", lambda k: str(k).translate(str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")),
             lambda k: str(k).translate(str.maketrans("0123456789", "۰۱۲۳۴۵۶۷۸۹")), lambda k: f"−{k}",
             lambda k: f"{k}-{k + 1}", lambda k: f"{k} kg", lambda k: f"level {k}"]
"""Quantities as locales, shops, sensors and reports write them: the families docs/reference.md ("What a class is")
says are never inferred as classes (a decimal comma or point, a currency before or after, a unit or degree sign, a
star, a percent, a fraction, another script's digits, a typographic minus, a range, a number beside a word)."""


@GENERATED
@given(rows=spelled_numbers())
def test_numbers_are_one_class_however_written_and_a_decorated_one_is_refused(rows, tmp_path_factory):
    folder = tmp_path_factory.mktemp("numbers")
    text = "text\tlabel\n" + "".join(f"row {i}\t{written}\n" for i, (_, written, _) in enumerate(rows))
    for name in ("train.tsv", "dev.tsv"):
        (folder / name).write_text(text, encoding="utf-8")
    read = _read(folder, {"train": "train.tsv", "validation": "dev.tsv", "problem_type": "classification"})
    # The rule's text: bare spellings of one integer are one class named by the integer, exactly (no float); a
    # quantity written any other way is refused, with both fixes; one class is refused.
    decorated = [w for _, w, odd in rows if odd]
    classes = sorted({code for code, _, _ in rows})
    if decorated or len(classes) < 2:
        assert isinstance(read, IstarTuneError), (rows, read)
        said = " ".join(_one_line(read))
        assert (any(repr(d) in said for d in decorated) and "problem_type: regression" in said
                and "label_names" in said) or "needs two classes" in said, (rows, said)
        return
    assert not isinstance(read, IstarTuneError), (rows, read)
    task, splits = read
    assert task.label_names == tuple(str(c) for c in classes)
    assert splits["train"]["label"] == [classes.index(code) for code, _, _ in rows]


SPELLINGS_OF_A_NAME = {
    "as written": lambda w: w,
    "a space around (Zs)": lambda w: f"\u00a0{w} ",
    "a zero-width space (Cf)": lambda w: w[:2] + "\u200b" + w[2:],
    "a byte-order mark (Cf)": lambda w: "\ufeff" + w,
    "decomposed (NFD)": lambda w: unicodedata.normalize("NFD", w),
    "quoted twice (JSON in JSON)": lambda w: json.dumps(w, ensure_ascii=False),
    "a variation selector (Mn)": lambda w: w + "\ufe0f",
    "title case": lambda w: w.title(),
    "full width (NFKC)": lambda w: "".join(chr(ord(c) + 0xFEE0) if "a" <= c <= "z" else c for c in w),
}
"""How exports and editors spell one class name: each from Unicode's categories and normal forms, or a
serialiser's habits."""
NAMES = ["café", "naïve", "plain"]


@GENERATED
@given(rows=st.lists(st.tuples(st.sampled_from(NAMES), st.sampled_from(sorted(SPELLINGS_OF_A_NAME))), min_size=4,
                     max_size=10))
def test_spellings_of_one_name_are_refused_or_one_class_by_the_stated_normal_form(rows, tmp_path_factory):
    folder = tmp_path_factory.mktemp("spellings")
    labels = [SPELLINGS_OF_A_NAME[how](name) for name, how in rows]
    path = folder / "train.jsonl"
    path.write_text("".join(json.dumps({"text": f"row {i}", "label": label}, ensure_ascii=False) + "\n"
                            for i, label in enumerate(labels)), encoding="utf-8")
    read = _read(folder, {"train": "train.jsonl", "validation": "train.jsonl"})

    # The rule's text (docs/tasks.md): surrounding whitespace is not part of a label; names are compared under NFKC,
    # format characters (Cf) and variation selectors (U+FE00-U+FE0F) removed, surrounding quotes and whitespace
    # stripped, case folded; two spellings that meet there are refused; otherwise the classes are the labels, sorted,
    # and two or more are needed.
    def key(text: str) -> str:
        text = "".join(c for c in unicodedata.normalize("NFKC", text)
                       if unicodedata.category(c) != "Cf" and not 0xFE00 <= ord(c) <= 0xFE0F).strip()
        while len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
            text = text[1:-1].strip()
        return text.casefold()

    written = [label.strip() for label in labels]
    spellings: dict[str, set[str]] = {}
    for text in written:
        spellings.setdefault(key(text), set()).add(text)
    met = [sorted(found) for found in spellings.values() if len(found) > 1]
    names = sorted(set(written))
    if met or len(names) < 2:
        assert isinstance(read, IstarTuneError), (labels, read)
        said = " ".join(_one_line(read))
        assert (repr(met[0][0]) in said) if met else ("needs two classes" in said), (labels, said)
        return
    assert not isinstance(read, IstarTuneError), (labels, read)
    task, splits = read
    assert task.label_names == tuple(names) and splits["train"]["label"] == [names.index(t) for t in written]


@GENERATED
@given(codes=st.lists(st.sampled_from([1, 8, 10, 90, 1000]), min_size=2, max_size=4, unique=True),
       leading=st.lists(st.booleans(), min_size=4, max_size=4), data=st.data())
def test_label_codes_in_a_definition_are_read_as_yaml_1_2_writes_them(codes, leading, data, tmp_path_factory):
    folder = tmp_path_factory.mktemp("codes")
    keys = [("0" if lead else "") + str(code) for code, lead in zip(codes, leading)]  # 010: ten, never octal 8
    names = [f"class{i}" for i in range(len(codes))]
    rows = data.draw(st.lists(st.sampled_from(codes), min_size=4, max_size=10))
    rows = rows + [c for c in codes if c not in rows]  # every class in the training split
    spelled = [data.draw(st.sampled_from([str(c), f"0{c}", f"{c}.0"])) for c in rows]
    (folder / "train.tsv").write_text("text\tlabel\n" + "".join(f"row {i}\t{s}\n" for i, s in enumerate(spelled)))
    mapping = ", ".join(f"{key}: {name}" for key, name in zip(keys, names))
    (folder / "task.yaml").write_text(f"name: codes\ntrain: train.tsv\nvalidation: train.tsv\ntext_fields: [text]\n"
                                      f"label_names: {{{mapping}}}\n")
    try:
        task, splits = read_task(task_of(str(folder / "task.yaml"), folder))
    except IstarTuneError as err:
        raise AssertionError(_one_line(err)) from None
    # The rule's text: a definition is YAML 1.2 (a leading zero changes nothing), and a number is one number however
    # a file writes it: each row's class is the one its code names, in the mapping's order.
    assert task.label_names == tuple(names)
    assert splits["train"]["label"] == [codes.index(c) for c in rows]


YAML_BOOLEANS = ["no", "yes", "on", "off", "true", "false", "No", "YES", "Off"]


@GENERATED
@given(words=st.lists(st.sampled_from(YAML_BOOLEANS + ["maybe", "none_of_these"]), min_size=2, max_size=3,
                      unique_by=str.lower), quoted=st.lists(st.booleans(), min_size=3, max_size=3))
def test_yaml_booleans_as_class_names_are_refused_unless_quoted(words, quoted, tmp_path_factory):
    folder = tmp_path_factory.mktemp("booleans")
    (folder / "train.tsv").write_text("text\tlabel\n" + "".join(f"row {i}\t{w}\n" for i, w in enumerate(words * 2)))
    written = [f"'{w}'" if q else w for w, q in zip(words, quoted)]
    (folder / "task.yaml").write_text("name: flags\ntrain: train.tsv\nvalidation: train.tsv\ntext_fields: [text]\n"
                                      f"label_names: [{', '.join(written)}]\n")
    try:
        read = read_task(task_of(str(folder / "task.yaml"), folder))
    except IstarTuneError as err:
        read = err
    # The rule's text: YAML reads an unquoted no, yes, on, off, true or false (any case YAML 1.1 knows) as a
    # boolean, and label_names holding one is refused with the fix: quote it.
    unquoted = [w for w, q in zip(words, quoted) if not q and w in YAML_BOOLEANS]
    if unquoted:
        assert isinstance(read, IstarTuneError), (written, read)
        assert "quote each class name" in " ".join(_one_line(read)), read
        return
    assert not isinstance(read, IstarTuneError), (written, read)
    assert read[0].label_names == tuple(words)


@pytest.mark.parametrize("fmt", ["csv", "tsv", "jsonl"])
@GENERATED
@given(labels=st.lists(st.sampled_from(["neg", "pos"]), min_size=3, max_size=8).filter(lambda ls: len(set(ls)) == 2),
       at=st.lists(st.integers(1, 8), min_size=1, max_size=2, unique=True))
def test_exports_concatenated_with_their_header_again_are_refused_naming_its_rows(fmt, labels, at, tmp_path_factory):
    folder = tmp_path_factory.mktemp("concatenated")
    rows = [(f"a review number {i}", label) for i, label in enumerate(labels)]
    for position in sorted(at):  # the header again where a second export begins
        rows.insert(min(position, len(rows)), ("text", "label"))
    header_rows = [i + 1 for i, row in enumerate(rows) if row == ("text", "label")]  # 1-based data rows
    if fmt == "jsonl":
        body = "".join(json.dumps({"text": t, "label": lab}) + "\n" for t, lab in rows)
    else:
        sep = "," if fmt == "csv" else "\t"
        body = f"text{sep}label\n" + "".join(f"{t}{sep}{lab}\n" for t, lab in rows)
    (folder / f"train.{fmt}").write_text(body)
    read = _read(folder, {"train": f"train.{fmt}", "validation": f"train.{fmt}"})
    # The rule's text: a row whose fields hold their own names (the header again mid-file) is refused in every
    # format, naming its rows.
    assert isinstance(read, IstarTuneError), (rows, read)
    said = " ".join(_one_line(read))
    assert f"rows {', '.join(map(str, header_rows))}: the row holds the fields' own names" in said, (rows, said)
