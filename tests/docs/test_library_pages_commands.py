"""The concepts page's dry runs and the Python API page's example run verbatim (tests/docs/conftest.py)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


def test_the_concepts_and_python_api_pages_run_verbatim(run_group):
    ran, skipped, _ = run_group("library")
    assert len(ran) >= 4 and not skipped
