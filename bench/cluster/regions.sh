#!/usr/bin/env bash
# bench/cluster/regions.sh: end-to-end delay with placement by measured RTT
# against placement on the node of the client's declared region, in an
# emulated three-region topology (netem namespaces; needs root). Writes
# bench/cluster/results/regions.jsonl, regions-meta.env and the plot
# docs/img/cluster-placement-delay.png, then rewrites the section
# "## Cluster: cascaded rooms" of docs/benchmarks.md from results/ (run.sh's
# report, which includes these results).
#
#   bench/cluster/regions.sh            # 3 runs, 10 s windows
#   RUNS=5 WINDOW=20s bench/cluster/regions.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

RUNS=${RUNS:-3}
WINDOW=${WINDOW:-10s}
OUT=bench/cluster/results
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$OUT" docs/img

command -v redis-server >/dev/null || { echo "regions.sh: redis-server missing (apt-get install redis-server)" >&2; exit 1; }
go build -o "$tmp/petrel" ./cmd/petrel
go build -o "$tmp/regions" ./bench/cluster/regions
{
	echo "STARTED=$(date -u +"%Y-%m-%d %H:%M UTC")"
	echo "COMMIT=$(git rev-parse --short HEAD)"
	echo "LOAD=$(cut -d' ' -f1-3 /proc/loadavg)"
	echo "CORES=$(nproc)"
	echo "RUNS=$RUNS"
	echo "WINDOW=$WINDOW"
} >"$tmp/meta.env"
"$tmp/regions" -bin "$tmp/petrel" -runs "$RUNS" -window "$WINDOW" -samples "$tmp/samples.txt" >"$tmp/regions.jsonl"
echo "LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)" >>"$tmp/meta.env"
cp "$tmp/regions.jsonl" "$OUT/regions.jsonl"
cp "$tmp/meta.env" "$OUT/regions-meta.env"

# The plot: the distribution of one-way delays of the last run, per room and placement.
python3 - "$tmp/samples.txt" "$tmp" <<'PY'
import sys, collections
by = collections.defaultdict(list)
for l in open(sys.argv[1]):
    k, v = l.split()
    by[k].append(float(v))
for k, v in by.items():
    v.sort()
    with open(f"{sys.argv[2]}/{k}.dat", "w") as f:
        for i, x in enumerate(v):
            f.write(f"{x:.2f} {(i + 1) / len(v):.4f}\n")
PY
gnuplot <<GP
set terminal pngcairo size 900,500
set output "docs/img/cluster-placement-delay.png"
set title "One-way delay, three emulated regions (RTT 30/80/150 ms between nodes)"
set xlabel "one-way delay (ms)"
set ylabel "share of frames"
set xrange [0:250]
set key bottom right
set grid
plot "$tmp/call-nearest.dat" using 1:2 with lines lw 2 dt 2 lc rgb "#1f77b4" title "1:1 call a-c, nearest node", \
     "$tmp/call-rtt.dat" using 1:2 with lines lw 2 lc rgb "#1f77b4" title "1:1 call a-c, placement by RTT", \
     "$tmp/room6-nearest.dat" using 1:2 with lines lw 2 dt 2 lc rgb "#d62728" title "room of 6 (2 per region), nearest node", \
     "$tmp/room6-rtt.dat" using 1:2 with lines lw 2 lc rgb "#d62728" title "room of 6, placement by RTT"
GP
REPORT_ONLY=1 bench/cluster/run.sh
