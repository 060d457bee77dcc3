"""How much of a run is left: what the progress line says while the search and the later stages run.

`outlook.py` (the search's own plan replayed on what it has measured so far), `forecast.py` (the
trials the search will still ask for, from its state) and `later_stages.py` (the fixes' and hunks'
trials). Above the search (it replays `search.localize`), never imported by it: the search runs the
same with or without a progress line.
"""
