"""The trial status type: one spelling, compared and written as the text MLflow's tag holds."""

from __future__ import annotations

import json

from istar_tune.trial_status import COUNTED, RECORDED, TrialStatus


def test_a_status_is_its_text_wherever_it_is_written_or_compared():
    assert TrialStatus.STOPPED_EARLY == "stopped_early" and f"{TrialStatus.FAILED}" == "failed"
    assert str(TrialStatus.INTERRUPTED) == "interrupted" and json.dumps([TrialStatus.RUNNING]) == '["running"]'
    assert {"finished": 3}.get(TrialStatus.FINISHED) == 3  # a tag's text finds the status, and back
    assert TrialStatus("failed") is TrialStatus.FAILED


def test_what_a_run_records_and_what_counts():
    assert TrialStatus.PENDING not in RECORDED  # planned trials have no run yet
    assert set(COUNTED) == {TrialStatus.FINISHED, TrialStatus.STOPPED_EARLY} and set(COUNTED) <= set(RECORDED)
