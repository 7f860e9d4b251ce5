"""One run: reading the data, the one training loop for every method, task and stage, and what it writes.

``data`` reads and tokenises a task; ``setup`` builds a run (device, precision, tokenizer, model, optimizer);
``sigma`` draws Σ_S; ``epoch`` is one training pass with the method's loss; ``evaluate`` measures the task and the
token cloud; ``selection`` chooses the scored epoch; ``state`` writes checkpoints and outputs; ``isolayer`` is
IsoLayer's layer and loss; ``loop.train`` runs them all.
"""
