"""The course's helpers: learner checks, pictures, widgets, and the exercise generator.

They may import the library and the tools; neither imports them. See docs/architecture.md.
"""
