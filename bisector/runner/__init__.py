"""Launches trial processes (`python -m benches.trial`) and turns their output into TrialRecords."""

from bisector.runner.launch import Launcher, run_trial
from bisector.runner.spec import build_spec

__all__ = ["Launcher", "build_spec", "run_trial"]
