"""Real upstream ranges, run like the demo: one folder per public kernel library.

Each `<lib>/` holds the config that measures the library's own entry points (`config.toml`), the
suite module its config brings (subject calls that translate the suite's inputs into the library's
calling convention), and `range.toml`, the vendored description of a range and the steps found in it
by hand (`ranges.py` reads it). The libraries' code is never here: the trial imports it from the
commit's checkout.
"""
