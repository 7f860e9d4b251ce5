"""One run: the one training loop for every method, task and stage, and what it writes.

``data`` tokenises a task's splits (read by :mod:`istar_tune.data`) and holds a share out; ``scale`` trains a
regression's scores as z-scores; ``run`` builds a run (device, precision, tokenizer, model, optimizer); ``forward`` is
the one pass over a split; ``sigma`` draws Σ_S; ``epoch`` is one training pass with the method's loss (``graphs``:
``step_mode: graphs``, a step replayed as one CUDA graph per batch shape); ``evaluate`` measures the task and the
token cloud; ``selection`` chooses the scored epoch; ``state`` writes checkpoints and outputs; ``isolayer`` is
IsoLayer's layer and loss; ``memory`` is one trial's peak memory, known before it starts; ``usage`` what an epoch
asked of the GPU; ``loop`` (``train``) runs them all, each fine-tuning stage set up and each of its epochs closed by
``fitting``. ``fused`` runs K configurations' steps as one stacked model (each member its own weights, optimizer,
loss and dropout draws), and ``bundle`` (``train_bundle``) fine-tunes such a bundle, each member's stage otherwise
the plain path's own: the training side of fused trials, which the search does not use yet.
"""
