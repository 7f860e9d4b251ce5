"""Search: from a search-space YAML to one Ray Tune experiment, its trials recorded in MLflow.

``space``/``space_file`` read and validate spaces; ``plan`` counts each (model, task, method) group's trials and what
its searcher hands out (``cost`` orders them); ``searcher`` and ``scheduler`` keep each group's trials compared only
with each other; ``trainable`` is the trial; ``checkpoints`` its checkpoint economy; ``callbacks`` log to MLflow and
print progress; ``preflight`` checks before anything starts; ``cluster`` joins Ray; ``run`` runs the experiment and
``outcome`` summarises it; ``simulate`` rehearses a search without training.
"""
