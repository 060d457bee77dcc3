"""How the bot is started day to day: nightly runs, PR-comment commands, and the per-GPU lock."""
