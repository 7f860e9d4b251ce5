"""Stanford sentiment trees: the root's label and the leaves' words; a line that is not a labelled tree named."""

from __future__ import annotations

import pytest

from istar_tune.data.ptb import parse_ptb
from istar_tune.errors import DataError
from istar_tune.tasks import Task

TASK = Task("sst5", "SST-5", "classification", "accuracy", text_fields=("sentence",))


def test_a_tree_gives_its_roots_label_and_its_leaves(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text("(3 (2 It) (4 (3 works) (2 .)))\n\n(0 (1 Dull))\n")
    assert parse_ptb(TASK, path) == {"sentence": ["It works .", "Dull"], "label": ["3", "0"]}


@pytest.mark.parametrize("line", ["(3 (2 It) (4 works)", "It works", "(x (2 It))"])
def test_a_line_that_is_not_a_labelled_tree_is_named(tmp_path, line):
    path = tmp_path / "train.txt"
    path.write_text(f"(3 (2 Fine))\n{line}\n")
    with pytest.raises(DataError, match=r"train.txt:2: not a labelled PTB tree"):
        parse_ptb(TASK, path)
