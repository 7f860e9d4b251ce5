"""Deciding what to run: a search space (``space``: models, tasks, methods, domains, groups), a grid's configurations
(``grid``), what ``search.fuse`` bundles (``fusing``), its YAML file (``file``, ``domains``), the cost model that orders
and prices its trials (``cost``), and a strategy taken from a replay's advice or a fragment (``strategy``:
``--strategy-from``)."""
