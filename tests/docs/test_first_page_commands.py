"""The README's commands run verbatim (tests/docs/conftest.py); each page the README links is run by one group, and
every command a page shows either runs or is listed with the reason it cannot run here."""

from __future__ import annotations

import pytest


def test_every_linked_page_with_commands_is_run_by_exactly_one_group(docs_index):
    grouped = [page for pages in docs_index.groups.values() for page in pages]
    assert len(grouped) == len(set(grouped)) and set(grouped) <= set(docs_index.pages)
    with_commands = [page for page in docs_index.pages if docs_index.commands(page)]
    assert set(with_commands) <= set(grouped), sorted(set(with_commands) - set(grouped))
    order = {page: i for i, page in enumerate(docs_index.pages)}
    for pages in docs_index.groups.values():  # a group reads its pages in the README's order
        assert pages == sorted(pages, key=order.get)


def test_every_reason_a_command_cannot_run_here_names_a_command_a_page_shows(docs_index):
    shown = [command for page in docs_index.pages for _, command in docs_index.commands(page)]
    unused = [pattern for pattern in docs_index.not_here if not any(pattern in command for command in shown)]
    assert not unused, f"NOT_HERE lists commands no page shows any more: {unused}"


@pytest.mark.slow
def test_the_first_pages_commands_run_verbatim(run_group):
    ran, skipped, work = run_group("first page")
    assert len(ran) >= 4 and {"make demo", "make test"} <= {command.split("#")[0].strip() for command in skipped}
    assert (work / "istar-runs" / "first-hour").is_dir()
