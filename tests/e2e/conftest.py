"""Shared by the end-to-end tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def validate_refits_once(monkeypatch, leave_one_source_out_result) -> None:
    """`validate`'s leave-one-source-out refit (7 fits, 15-40 s on 2 cores) computed once per session: the
    validate tests print it as JSON, wide, at 80 and at 200 columns, and the refit is pure (the published rows and
    the unfitted constants), so every print after the first renders the same result again. The CLI imports the
    function from its module at each call (cli/costmodel.validate), so replacing the module's attribute is what
    the command sees; the refit itself is checked in tests/unit/test_costmodel_validate.py."""
    from scalestudy.costmodel import published

    monkeypatch.setattr(published, "leave_one_source_out", lambda: leave_one_source_out_result)
