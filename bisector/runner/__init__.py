"""Trial processes (`benches.worker` / `benches.trial`), prepared ahead and lent the device in turn."""

from bisector.runner.launch import make_executor, run_trial
from bisector.runner.spec import build_spec

__all__ = ["build_spec", "make_executor", "run_trial"]
