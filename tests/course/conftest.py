"""Checks draw a heat-map when an answer is wrong; close every figure after each test so that
hundreds of failing checks do not pile up open figures (matplotlib warns past 20)."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402  (after choosing the headless backend)
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")
