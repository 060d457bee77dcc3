"""Scripts that measure the bot itself (not tests: figures, printed)."""
