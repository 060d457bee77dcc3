#!/usr/bin/env bash
# Re-make the example reports in reports/ from their committed stores, with the code of this
# checkout: `bisector run --offline` replays the search and every later stage on the stored trials
# (no build, no trial, no GPU), so a report always shows what the code that ships makes of them.
#
#   bash reports/remake.sh            # every example that has a store
#   bash reports/remake.sh gpu-demo   # one of them
#
# Each example folder keeps what a re-make cannot make again (its README, its results.sqlite.gz,
# the run's progress log, the config it ran with); everything else in it is replaced.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# The demo upstream is written from bisector/demo with fixed dates and authors: the same commits,
# the same SHAs, on every machine.
read -r good bad < <(python -c "
from bisector.demo import write_demo_repo
m = write_demo_repo('$tmp/upstream'); print(m.good, m.bad)")

# remake FOLDER CONFIG [run options...]: the example in reports/FOLDER from its store and its
# config (FOLDER/config.toml, else configs/CONFIG), pointed at the upstream written above.
remake() {
    local name="$1" config="$2"
    shift 2
    local dir="reports/$name" work="$tmp/$name"
    if [[ ! -f "$dir/results.sqlite.gz" ]]; then
        echo "remake: $dir has no results.sqlite.gz: not re-made" >&2
        return 0
    fi
    mkdir -p "$work"
    gunzip -c "$dir/results.sqlite.gz" > "$work/results.sqlite"
    local source="configs/$config"
    [[ -f "$dir/config.toml" ]] && source="$dir/config.toml"  # the config the run was made with
    sed "0,/^repo = /s#^repo = .*#repo = \"$tmp/upstream\"#" "$source" > "$work/$config"
    python -m bisector run --config "$work/$config" --good "$good" --bad "$bad" --offline \
        --store "$work/results.sqlite" --work-dir "$work/work" --report-dir "$work/report" --json "$@" \
        > "$work/result.json"
    find "$dir" -mindepth 1 -maxdepth 1 ! -name README.md ! -name results.sqlite.gz ! -name 'progress*.log' \
        ! -name config.toml -exec rm -rf {} +
    cp -r "$work/report/." "$dir/"
    # The run's JSON as --json printed it, its paths (the report, its patches) relative to the report:
    # as printed they lead into this script's temporary dir
    python -c "
import json, os
made = os.path.relpath('$work/report') + '/'
text = open('$work/result.json').read().replace(json.dumps(made)[1:-1], '')
json.dump(json.loads(text), open('$dir/result.json', 'w'), indent=2)"
    echo "remake: $dir/report.md"
}

examples=("${@:-cpu-demo gpu-demo gpu-latency}")
for name in ${examples[@]}; do
    case "$name" in
        cpu-demo) remake cpu-demo cpu-demo.toml ;;
        gpu-demo) remake gpu-demo h200-demo.toml --shapes fa/s16384,gemm/m8192,gemm/m54560,gemm/decode ;;
        gpu-latency) remake gpu-latency h200-demo.toml --shapes gemm/decode --no-hunks ;;
        real-library) echo "remake: real-library: made with its own upstream, see reports/README.md" >&2 ;;
        *) echo "remake: unknown example $name (cpu-demo, gpu-demo, gpu-latency)" >&2; exit 2 ;;
    esac
done
