"""Measuring a commit through the store: the probe (build if needed, run only the trials the store
lacks), the warmer (the search's next commits built and compiled cold ahead) and where a run's
time went. Above the runner and the store; the search and the why-stages are handed its probe."""
