"""bisector: find every performance step in a range of kernel-library commits."""

__version__ = "0.1.0"
