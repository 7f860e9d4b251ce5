from __future__ import annotations

import math

import datasets
import numpy as np
import pytest

from istar_tune.data.reading import load_raw
from istar_tune.metrics import squad_scores
from istar_tune.models import load_tokenizer
from istar_tune.tasks import get_task
from istar_tune.training.data import encode, squad_predictions, squad_references


def test_classification_encoding_keeps_labels_and_truncates(glue_tiny):
    task = get_task("rte")
    tokenizer = load_tokenizer("tiny-bert")
    encoded = encode(task, load_raw(task, glue_tiny), tokenizer, max_length=16)
    assert max(len(ids) for ids in encoded.train["input_ids"]) == 16
    np.testing.assert_array_equal(encoded.labels, load_raw(task, glue_tiny)["validation"]["label"])


def test_squad_windows_and_post_processing_recover_gold_answers(glue_tiny):
    task = get_task("squad")
    tokenizer = load_tokenizer("tiny-bert")
    raw = load_raw(task, glue_tiny)
    encoded = encode(task, raw, tokenizer, max_length=48)
    assert len(encoded.validation) > len(raw["validation"])  # long contexts are split into windows
    # Training labels point at the answer's tokens in windows that hold it, at [CLS] (0) in the others.
    answers = {a.lower().replace(" ", "") for row in raw["train"] for a in row["answers"]["text"]}
    labelled = [f for f in encoded.train if f["start_positions"] > 0]
    assert 0 < len(labelled) < len(encoded.train)
    for feature in labelled:
        span = tokenizer.decode(feature["input_ids"][feature["start_positions"]:feature["end_positions"] + 1])
        span = span.lower().replace(" ", "")
        assert any(answer in span or span in answer for answer in answers)  # "gold" lies inside token "golden"
    # Logits that peak on each gold answer's tokens give back the gold text: EM = F1 = 100.
    n, length = len(encoded.validation), max(len(x) for x in encoded.validation["input_ids"])
    start, end = np.full((n, length), -10.0), np.full((n, length), -10.0)
    gold = {}
    for row in raw["validation"]:
        first = row["answers"]["answer_start"][0]
        gold[row["id"]] = (first, first + len(row["answers"]["text"][0]))
    for i, (qid, offsets) in enumerate(zip(encoded.eval_example_ids, encoded.eval_offsets)):
        char_start, char_end = gold[qid]
        for k, span in enumerate(offsets):
            if span is not None and span[0] <= char_start < span[1]:
                start[i, k] = 10.0
            if span is not None and span[0] < char_end <= span[1]:
                end[i, k] = 10.0
    (predictions, no_answer), references = squad_predictions(encoded, start, end), squad_references(encoded)
    assert no_answer == {}  # SQuAD v1.1: no null answer
    assert set(predictions) == set(references)
    for qid, truths in references.items():
        # Exact, or the token containing a sub-token answer ("5" inside the token "50").
        assert predictions[qid] == truths[0] or (truths[0] in predictions[qid] and len(predictions[qid].split()) == 1)
    assert squad_scores(predictions, references)["exact_match"] > 90


def test_a_holdout_is_a_seeded_random_share_of_the_whole_training_set(glue_tiny):
    from istar_tune.errors import ConfigError
    from istar_tune.training.data import hold_out

    task = get_task("sst2")
    tokenizer = load_tokenizer("tiny-bert")
    data = encode(task, load_raw(task, glue_tiny), tokenizer, 48)
    first, again, other = (hold_out(data, 0.3, seed) for seed in (1, 1, 2))
    n = len(data.train)
    assert len(first.holdout) == math.ceil(0.3 * n) and len(first.train) + len(first.holdout) == n
    rows = [tuple(r["input_ids"]) for r in data.train]
    held = [rows.index(tuple(r["input_ids"])) for r in first.holdout]
    assert held == [rows.index(tuple(r["input_ids"])) for r in again.holdout]  # the same seed: the same split
    assert held != [rows.index(tuple(r["input_ids"])) for r in other.holdout]
    assert max(held) > n // 2 and min(held) < n // 2  # drawn from the whole file, not its head or tail
    assert first.validation is data.validation
    squad = get_task("squad")
    with pytest.raises(ConfigError, match="sentence-level"):
        hold_out(encode(squad, load_raw(squad, glue_tiny), tokenizer, 64), 0.3, 1)


def test_the_tokenised_splits_fingerprint_follows_what_decides_them(glue_tiny):
    task, tokenizer = get_task("rte"), load_tokenizer("tiny-bert")
    raw = load_raw(task, glue_tiny, max_train_samples=16, max_eval_samples=8)
    data = encode(task, raw, tokenizer, max_length=24)
    # The same rows as datasets' own hashing gives them, under a fingerprint of the inputs (stable across runs).
    default = raw["train"].map(lambda b: tokenizer(*[b[f] for f in task.text_fields], truncation=True,
                                                   max_length=24), batched=True)
    assert data.train["input_ids"] == default["input_ids"]
    again = encode(task, load_raw(task, glue_tiny, max_train_samples=16, max_eval_samples=8), tokenizer, 24)
    assert again.train._fingerprint == data.train._fingerprint
    assert data.train._fingerprint != data.validation._fingerprint
    assert encode(task, raw, tokenizer, max_length=32).train._fingerprint != data.train._fingerprint
    other = load_tokenizer("tiny-bert")
    other.add_tokens(["isotropy"])  # another vocabulary at the same name
    assert encode(task, raw, other, max_length=24).train._fingerprint != data.train._fingerprint
    fewer = load_raw(task, glue_tiny, max_train_samples=8, max_eval_samples=8)
    assert encode(task, fewer, tokenizer, max_length=24).train._fingerprint != data.train._fingerprint


def test_a_question_that_leaves_no_room_for_its_context_is_refused_naming_its_rows(glue_tiny):
    from istar_tune.errors import ConfigError

    task = get_task("squad")
    tokenizer = load_tokenizer("tiny-bert")
    raw = load_raw(task, glue_tiny)
    long = " ".join(["which"] * 40) + "?"
    raw["validation"] = raw["validation"].map(lambda row, i: {"question": long if i == 2 else row["question"]},
                                              with_indices=True)
    with pytest.raises(ConfigError) as err:  # the tokenizer's own truncation error before
        encode(task, raw, tokenizer, max_length=48)
    assert str(err.value) == ("validation rows 3: a question of 41 tokens leaves no room for its context in a 48-token "
                              "window overlapping by 12: raise the window (max_length; a recipe's squad_window where "
                              "it sets one), or shorten those questions")
    assert len(encode(task, raw, tokenizer, max_length=96).validation) > 0


def test_a_holdout_that_leaves_one_training_class_is_refused(glue_tiny):
    import datasets

    from istar_tune.errors import ConfigError
    from istar_tune.training.data import hold_out

    task = get_task("sst2")
    raw = load_raw(task, glue_tiny)
    tokenizer = load_tokenizer("tiny-bert")
    first = raw["train"].filter(lambda row: row["label"] == 0).select(range(5))
    other = raw["train"].filter(lambda row: row["label"] == 1).select(range(1))
    raw["train"] = datasets.concatenate_datasets([first, other])
    data = encode(task, raw, tokenizer, 32)
    seeds = [seed for seed in range(20) if 1 in hold_out_labels(data, seed)]
    assert seeds  # some seeds hold the one positive example out
    with pytest.raises(ConfigError, match=f"holdout 0.3 with seed {seeds[0]} leaves one class in the 4 training"):
        hold_out(data, 0.3, seeds[0])


def hold_out_labels(data, seed: int) -> set[int]:
    """The labels a seeded 0.3 holdout takes (the same split :func:`hold_out` draws)."""
    return set(data.train.train_test_split(test_size=0.3, seed=seed, shuffle=True)["test"]["labels"])


WORDS = ["river", "stone", "green", "house", "light", "window", "garden", "paper", "music", "table", "bridge",
         "winter", "summer", "market", "forest"]


@pytest.mark.parametrize("window", [24, 32])
def test_every_encoded_span_decodes_to_its_answer_at_every_edge(window):
    """Answers at each word of a context (its first word, its very last, a window's edge, across a doc stride), one
    and two words long: every window labelled with a span decodes back to the answer text, and every answer that fits
    a window is labelled in one. The reference is the answer text itself, not the code's offsets."""
    tokenizer = load_tokenizer("tiny-bert")
    rng = np.random.default_rng(window)
    rows = {"id": [], "question": [], "context": [], "answers": []}
    for n in range(6):
        words = list(rng.choice(WORDS, size=int(rng.integers(8, 40))))
        context = " ".join(words)
        for at in range(len(words)):
            for length in (1, 2):
                if at + length > len(words):
                    continue
                start = len(" ".join(words[:at])) + (1 if at else 0)
                text = " ".join(words[at:at + length])
                assert context[start:start + len(text)] == text
                rows["id"].append(f"c{n}w{at}l{length}")
                rows["question"].append(f"question {len(rows['id']) - 1}")
                rows["context"].append(context)
                rows["answers"].append({"text": [text], "answer_start": [start]})
    data = datasets.Dataset.from_dict(rows)
    encoded = encode(get_task("squad"), datasets.DatasetDict(train=data, validation=data), tokenizer,
                     max_length=window)
    labelled: set[int] = set()
    for feature in encoded.train:
        start, end = feature["start_positions"], feature["end_positions"]
        if start == 0 and end == 0:
            continue
        ids = feature["input_ids"]
        row = int(tokenizer.decode(ids[1:ids.index(tokenizer.sep_token_id)]).split()[-1])  # "question 12"
        assert tokenizer.decode(ids[start:end + 1]) == rows["answers"][row]["text"][0], (row, start, end)
        labelled.add(row)
    # Every answer is some window's span: the context's last word, the windows' edges and strides included.
    assert labelled == set(range(len(rows["id"]))), sorted(set(range(len(rows["id"]))) - labelled)[:5]


def test_an_answer_longer_than_every_window_is_counted_not_trained_silently():
    tokenizer = load_tokenizer("tiny-bert")
    words = list(np.random.default_rng(0).choice(WORDS, size=60))
    context = " ".join(words)
    long_answer, short = " ".join(words[5:45]), words[50]
    rows = {"id": ["long", "short"], "question": ["which?", "which?"], "context": [context, context],
            "answers": [{"text": [long_answer], "answer_start": [context.index(long_answer)]},
                        {"text": [short], "answer_start": [len(" ".join(words[:50])) + 1]}]}
    data = datasets.Dataset.from_dict(rows)
    encoded = encode(get_task("squad"), datasets.DatasetDict(train=data, validation=data), tokenizer, max_length=32)
    assert encoded.answers_beyond_windows == 1  # the 40-word answer: no 32-token window holds it whole
    assert "example" not in encoded.train.column_names
    from dataclasses import replace

    line = replace(get_task("squad"), answers_beyond_windows=1).describe()
    assert "answers longer than every window (trained as no answer; raise max_length): 1" in line
