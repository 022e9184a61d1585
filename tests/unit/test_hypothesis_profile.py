"""The suite's hypothesis profile (tests/conftest.py): a CI run tries the same examples every
time and cannot fail on a slow example, also for tests that set their own example count."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings


@pytest.mark.skipif(
    os.environ.get("HYPOTHESIS_PROFILE", "ci") != "ci", reason="another profile was asked for"
)
def test_ci_profile_is_reproducible_and_has_no_deadline() -> None:
    for effective in (settings.default, settings(max_examples=8)):
        assert effective.derandomize
        assert effective.deadline is None
        assert effective.database is None
