"""``python -m istar_tune``: the same as the ``istar-tune`` command."""

from istar_tune.cli import main

raise SystemExit(main())
