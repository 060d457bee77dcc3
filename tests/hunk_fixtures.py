"""A hunk finding shaped like a real culprit's: Liger-Kernel's LayerNorm rewrite 6a2c491 (#815), as
the bot's hunk search left it on the lent H100. Its 11 hunks: 5 in files no trial loaded (set
aside), 6 rewritten ones cut into 25 statement pieces searched on an (empty) threading base; the
search spent its patched builds with the step within 14 statements of 4 hunks, after 63 subsets,
most never built because their Python would not run (the same few reasons over and over).

The labels and reasons are the run's (file, hunk headers, line numbers, error text); the subsets
tried are made up in its shape."""

from __future__ import annotations

from bisector.why.culprit_hunks import HunkFinding, HunkTry

FILE = "src/liger_kernel/ops/layer_norm.py"
_HEADERS = {
    "-1": "-1,4 +1,3",
    "-43": "-43,30 +42,45",
    "-81": "-81,73 +95,87",
    "-159": "-159,7 +187,9",
    "-176": "-176,35 +206,43",
    "-212": "-212,41 +250,41",
}
_PIECES = [
    ("-1", ""),
    *[("-43", x) for x in ("+45-83", "+49-50", "+51")],
    *[("-81", x) for x in ("-84-85", "-87", "-89", "+109-164", "-101", "-102", "-106", "-107-108")],
    ("-159", "+190-192"),
    *[("-176", x) for x in ("+216-227", "-190", "-191-195", "+235-238", "+243", "-206", "-207")],
    *[("-212", x) for x in ("+264-265", "+272-287", "-234-235", "-237", "-239")],
]
#: the 25 behaviour-changing pieces, labelled as hunk_plumbing labels them
PIECES = tuple(f"{FILE} @@ {_HEADERS[h]} @@" + (f" lines {lines}" if lines else "") for h, lines in _PIECES)
#: the 14 the search narrowed the step to
FOUND = tuple(PIECES[i] for i in (3, 4, 5, 6, 7, 8, 9, 10, 16, 20, 21, 22, 23, 24))

BLOCK_SIZE = f"would not run: {FILE}: _layer_norm_backward_kernel() got multiple values for argument 'BLOCK_SIZE'"
_OTHER = [
    f"would not run: {FILE}: name 'DB' is not defined (NameError); {FILE}: name 'DW' is not defined (NameError)",
    f"would not run: {FILE}: name 'rows_per_program' is not defined (NameError)",
    f"would not run: {FILE}: local variable 'db_row' is read before it is bound (UnboundLocalError; in a @jit "
    "kernel, also after the loop or the one branch that binds it)",
    f"would not run: {FILE}: _layer_norm_backward_kernel() missing 1 required argument: 'n_cols'",
    f"would not run: {FILE}: name 'sm_count' is not defined (NameError)",
]
CRASH = "does not run: AcceleratorError: CUDA error: an illegal memory access was encountered"
N_BLOCK_SIZE = 12


def _subset(i: int) -> tuple[str, ...]:
    """The i-th refused subset: a run of 3 to 9 pieces somewhere in the 25, on the base."""
    start, size = (7 * i) % 20, 3 + i % 7
    return ("plumbing base", *PIECES[start : start + size])


def liger_like_finding() -> HunkFinding:
    shapes = {"ln/t16k_d4096": -51.5, "ln/t16k_d4096:latency": -53.5}
    tries = [
        HunkTry(("plumbing base",), False, {"ln/t16k_d4096": 3.9, "ln/t16k_d4096:latency": 4.5}, trials=2),
        HunkTry(("plumbing base", *PIECES), True, shapes, trials=2),
    ]
    tries += [HunkTry(_subset(i), None, {}, BLOCK_SIZE) for i in range(N_BLOCK_SIZE)]
    tries += [HunkTry(("plumbing base", *FOUND[: 14 - k]), True, shapes, trials=2) for k in range(1, 7)]
    tries += [HunkTry(_subset(100 + i), None, {}, _OTHER[i % len(_OTHER)]) for i in range(40)]
    tries += [
        HunkTry(("plumbing base", *FOUND[:9]), None, {}, CRASH),
        HunkTry(("plumbing base", *FOUND[2:]), None, {}, "wrong result in ln/t16k_d4096"),
        HunkTry(("plumbing base", *FOUND), True, shapes, trials=2),
    ]
    return HunkFinding(
        "6a2c49130ed2464bdcb45ec7d3091e0a384115ee",
        11,
        FOUND,
        False,
        tuple(tries),
        "/r/hunk-6a2c491.patch",
        f"--- a/{FILE}\n+++ b/{FILE}\n@@ -43,1 +42,1 @@\n-a\n+b\n",
        complete=False,
        stopped_at="builds",
        unresolved=54,
        shown_minimal=False,
        n_behaviour=6,
        n_pieces=25,
        found_hunks=4,
        pieces_in_found=23,
        base_patch_path="/r/hunk-6a2c491-plumbing.patch",
        aside=("benchmark/data/all_benchmark_data.csv", "test/transformers/test_layer_norm.py"),
        n_aside=5,
    )
