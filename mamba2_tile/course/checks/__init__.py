"""Learner checks: run an exercise on fresh inputs, compare with the package, explain what differs.

``feedback`` holds the comparison and reporting shared by every check; the other modules hold the
checks for one part of the course each.
"""
