"""One run: the one training loop for every method, task and stage, and what it writes.

``data`` tokenises a task's splits (read by :mod:`istar_tune.data`); ``setup`` builds a run (device, precision,
tokenizer, model, optimizer); ``sigma`` draws Σ_S; ``epoch`` is one training pass with the method's loss;
``evaluate`` measures the task and the token cloud; ``selection`` chooses the scored epoch; ``state`` writes
checkpoints and outputs; ``isolayer`` is IsoLayer's layer and loss; ``loop.train`` runs them all.
"""
