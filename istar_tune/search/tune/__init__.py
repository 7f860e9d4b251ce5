"""What runs inside Ray Tune: the trial (``trainable``; a fused trial's bundle of configurations, ``fused``), what it
reports (``reporter``) and its checkpoints (``checkpoints``), the per-group searcher and scheduler (``searcher``,
``scheduler``), the MLflow logger (``callbacks``) and the progress lines and trial statuses (``progress``), Tune's own
state read back, copied and repaired before ``--resume`` (``state``), and the rehearsal stand-in for a trial
(``simulate``)."""
