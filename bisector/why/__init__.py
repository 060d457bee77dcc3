"""Why a step happened, after the search has found it: the hunks that carry it (hunks,
culprit_hunks, hunk_groups), whether reverting it on the tip restores the speed (fixes), how steps on
the same shapes combine (interactions) and what changed in the compiled kernel (kernel_diff/).
Each module defines the result types it makes; the report only renders them."""
