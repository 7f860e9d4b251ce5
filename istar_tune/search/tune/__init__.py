"""What runs inside Ray Tune: the trial (``trainable``) and its checkpoints (``checkpoints``), the per-group searcher
and scheduler (``searcher``, ``scheduler``), the MLflow logger and progress printer (``callbacks``), Tune's own state
read back, copied and repaired before ``--resume`` (``state``), and the rehearsal stand-in for a trial
(``simulate``)."""
