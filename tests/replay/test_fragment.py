from __future__ import annotations

from istar_tune.replay.fragment import KEEP_GRID, advised_fragment, fragment, parameters
from istar_tune.replay.summary import Advice


def test_a_replayed_setting_is_written_with_the_searchs_keys():
    assert parameters("grace=1 eta=2.5 workers=4") == {"grace": 1, "eta": 2.5, "workers": 4}
    assert fragment("asha", "grace=1 eta=2 workers=4") == {
        "search": {"algorithm": "grid", "num_samples": 1},
        "scheduler": {"type": "asha", "grace_period": 1, "reduction_factor": 2}, "concurrency": 4}
    assert fragment("hyperband", "grace=1 eta=3 workers=2")["scheduler"] == {"type": "hyperband", "grace_period": 1,
                                                                            "reduction_factor": 3}
    assert fragment("median", "grace=2 workers=4")["scheduler"] == {"type": "median", "grace_period": 2}
    assert fragment("conformal", "grace=1 alpha=0.2 workers=4")["scheduler"] == {"type": "conformal",
                                                                                 "grace_period": 1, "alpha": 0.2}
    assert fragment("tpe", "k=7") == {"search": {"algorithm": "tpe", "num_samples": 7}, "scheduler": {"type": "none"}}
    assert fragment("random", "k=3")["search"] == {"algorithm": "random", "num_samples": 3}


def test_only_a_decided_recommendation_becomes_a_fragment():
    assert advised_fragment(Advice("setting", "median", "grace=1 workers=4"))["scheduler"]["type"] == "median"
    assert advised_fragment(Advice("grid", "asha", "grace=1 eta=2 workers=4")) == KEEP_GRID
    assert advised_fragment(Advice("undecided", "asha", "grace=1 eta=2 workers=4")) is None
    assert advised_fragment(Advice("nothing")) is None
