"""Small, good Triton subjects for the harness's own noise measurement (harness_noise.py)."""
