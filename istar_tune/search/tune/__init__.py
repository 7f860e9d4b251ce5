"""What runs inside Ray Tune: the trial (``trainable``) and its checkpoints (``checkpoints``), the per-group searcher
and scheduler (``searcher``, ``scheduler``), the MLflow logger and progress printer (``callbacks``), and the rehearsal
stand-in for a trial (``simulate``)."""
