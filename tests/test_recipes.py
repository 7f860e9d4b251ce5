"""The training recipes: the paper's is the released I-STAR code's training, the modern one today's defaults; only a
recipe with a constant learning rate lets shorter runs be the start of longer ones."""

from __future__ import annotations

from istar_tune.config import RunSettings, prefix_sharing_problem
from istar_tune.recipes import RECIPES


def test_the_paper_recipe_is_the_released_codes_training():
    paper = RECIPES["paper"]
    assert (paper.weight_decay, paper.schedule, paper.clip, paper.auto_precision_on_cuda) == (0.0, "constant", False,
                                                                                               "fp16")
    assert (paper.adam_epsilon, paper.squad_window, paper.squad_stride) == (1e-6, 384, 128)


def test_the_modern_recipe_decays_clips_and_takes_bf16_with_the_weight_decay_hyperparameter():
    modern = RECIPES["modern"]
    assert (modern.weight_decay, modern.schedule, modern.clip, modern.auto_precision_on_cuda) == (None, "linear", True,
                                                                                                   "bf16")
    assert modern.squad_window is None and modern.squad_stride is None


def test_only_a_constant_schedule_lets_runs_share_epoch_prefixes():
    for name, recipe in RECIPES.items():
        problem = prefix_sharing_problem(RunSettings(recipe=name), "base")
        assert (problem is None) == (recipe.schedule == "constant"), name
