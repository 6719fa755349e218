"""Placement policy. Arrays in, arrays out. No I/O, no clock, no logging.

Every function here is pure and deterministic: time and randomness come in as
arguments, inputs are clamped rather than trusted, and the maths is in the
docstrings with its paper reference. The simulator and the cluster components
call exactly this code. Only numpy, ``stowage.resources``, ``stowage.config``
and ``stowage.labels`` may be imported here (an import-linter contract checks it).
"""
