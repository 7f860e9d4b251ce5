"""docs/tasks.md runs verbatim: one's own data written, its task and space files, a train of each kind, a search and
its table (tests/docs/conftest.py)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


def test_the_own_tasks_page_runs_verbatim(run_group):
    ran, skipped, work = run_group("own tasks")
    assert len(ran) >= 5 and not skipped
    assert (work / "my-task" / "task.yaml").is_file() and (work / "runs" / "reviews-search").is_dir()
