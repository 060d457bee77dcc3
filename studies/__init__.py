"""Studies: scripts that measure the bot itself (noise, throughput, search accuracy, replays),
run by hand on the host, with their recorded figures in studies/results/.

Unlike benches/ (the instrument inside the trial process), these may import `bisector`.
"""
