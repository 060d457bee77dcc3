"""The measuring instrument: runs inside the trial process, next to the upstream's code.

Imports nothing from `bisector`; needs only torch (and triton for Triton subjects).
"""
