"""The CLI layer: one click command per module; the only place that prints."""
