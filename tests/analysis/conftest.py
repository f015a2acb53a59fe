"""Fixtures shared by the analysis tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def kept_figures(monkeypatch):
    """Figures stay open until the test has looked at them: pyplot's close is deferred to teardown."""
    import matplotlib.pyplot as plt

    close, kept = plt.close, []
    monkeypatch.setattr(plt, "close", kept.append)
    yield kept
    for fig in kept:
        close(fig)
