"""Learner checks: run an exercise on fresh inputs, compare with the package, explain what differs.

``feedback`` holds the comparison and reporting shared by every check; the other modules hold the
checks for one part of the course each.

When stuck, ``hint("07.3")`` prints an exercise's second, more specific hint and
``reveal("07.3")`` its solution (:mod:`mamba2_tile.course.checks.stuck`).
"""

from mamba2_tile.course.checks.stuck import hint, reveal

__all__ = ["hint", "reveal"]
