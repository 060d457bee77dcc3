"""What changed in the compiled kernel across a step: the JIT caches' artifacts of the parent and
the culprit, kept next to the report (artifacts), their metadata and resources (resources), an
instruction histogram by class (isa), matched and compared (diff), for every verified step (collect)."""
