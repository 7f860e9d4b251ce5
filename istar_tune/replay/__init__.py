"""Learning from a finished grid: every configuration's recorded curve replayed under cheaper search strategies
(random search, TPE, and every registered early-stopping scheduler: ASHA, asynchronous Hyperband, median stopping,
conformal, one's own), to measure which of them would have chosen what the grid chose, and for what share of its cost.
``curves`` (the data and the choice rule), ``schedulers`` (the workers, random search and TPE, and driving a
scheduler's own object), ``summary`` (replays over seeds, the table, the recommendation), ``fragment`` (the
recommendation as a search-space fragment), ``reading`` (MLflow to curves), ``run`` (the command), ``export`` (the
grid's curves as a public benchmark: a long table, Syne Tune's blackbox files)."""
