"""Tools: commands that measure the library on a GPU and keep what they measured.

They import the library (the modules one level up), never the course. See docs/architecture.md.
"""
