#!/usr/bin/env bash
# bench/conference/run.sh: Last-N, simulcast and layer-switch benchmarks; rewrites
# the section "## Conferencing: Last-N, simulcast, layer switches" of
# docs/benchmarks.md (and nothing else in it) and the plots docs/img/conference-*.png.
#
#   bench/conference/run.sh                 # RUNS=3, 10 s windows: about 8 minutes
#   RUNS=1 DURATION=5s bench/conference/run.sh
#   MODES="switch" bench/conference/run.sh  # one part (the others keep their results)
#   REPORT_ONLY=1 bench/conference/run.sh   # rewrite the section from results/ only
#
# Raw results: bench/conference/results/{lastn,simulcast,switch}.jsonl (one JSON
# object per run) and meta-{mode}.env (when, which commit, load). The plots need gnuplot (apt-get install gnuplot-nox).
set -euo pipefail
cd "$(dirname "$0")/../.."

RUNS=${RUNS:-3}
DURATION=${DURATION:-10s}
MODES=${MODES:-"lastn simulcast switch"}
PARTICIPANTS=${PARTICIPANTS:-30}   # Last-N room
PUBLISHERS=${PUBLISHERS:-10}       # simulcast room
OUT=bench/conference/results
DOC=docs/benchmarks.md
SECTION="## Conferencing: Last-N, simulcast, layer switches"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$OUT" docs/img

if [ -z "${REPORT_ONLY:-}" ]; then
	go build -o "$tmp/benchserver" ./bench/cmd/benchserver
	go build -o "$tmp/conference" ./bench/conference
	commit="$(git rev-parse --short HEAD)"
	if ! git diff --quiet HEAD -- sfu rtc signal server client config bwe 2>/dev/null; then
		commit="$commit plus uncommitted changes in the server's packages"
	fi
	{
		echo "RUNS=$RUNS"
		echo "DURATION=$DURATION"
		echo "STARTED=$(date -u +"%Y-%m-%d %H:%M UTC")"
		echo "COMMIT=$commit"
		echo "LOAD=$(cut -d' ' -f1-3 /proc/loadavg)"
	} >"$tmp/meta.env"
	for mode in $MODES; do
		: >"$tmp/$mode.jsonl"
		for run in $(seq "$RUNS"); do
			echo "run.sh: $mode, run $run of $RUNS" >&2
			case $mode in
			lastn) "$tmp/conference" -server "$tmp/benchserver" -mode lastn -n "$PARTICIPANTS" -lastn 0,3,5,8 -kbps 150 -duration "$DURATION" >>"$tmp/$mode.jsonl" ;;
			simulcast) "$tmp/conference" -server "$tmp/benchserver" -mode simulcast -n "$PUBLISHERS" -kbps 1500 -duration "$DURATION" >>"$tmp/$mode.jsonl" ;;
			switch) "$tmp/conference" -server "$tmp/benchserver" -mode switch -receivers 3 -switches 20 -kbps 1500 >>"$tmp/$mode.jsonl" ;;
			*) echo "run.sh: unknown mode $mode" >&2; exit 2 ;;
			esac
		done
		# Written at the end, so that an interrupted run leaves the old results.
		cp "$tmp/$mode.jsonl" "$OUT/$mode.jsonl"
		cp "$tmp/meta.env" "$OUT/meta-$mode.env"
	done
fi

python3 bench/conference/report.py "$OUT" "$tmp" >"$tmp/section"

if command -v gnuplot >/dev/null; then
	if [ -f "$tmp/lastn.dat" ]; then
		gnuplot <<EOF
set terminal pngcairo size 760,420 font "sans,10"
set output "docs/img/conference-lastn.png"
set title "30-person room: egress and server CPU against Last-N"
set style data histograms
set style fill solid 0.8 border -1
set boxwidth 0.6
set ylabel "egress (Mbit/s)"
set y2label "server CPU (% of one core)"
set y2tics
set ytics nomirror
set yrange [0:*]
set y2range [0:*]
set xlabel "Last-N"
set grid ytics
plot "$tmp/lastn.dat" using 2:xtic(1) title "egress" lc rgb "#4477aa", \
     "" using 0:3 axes x1y2 with linespoints lw 2 pt 7 lc rgb "#cc6677" title "server CPU"
EOF
	fi
	if [ -f "$tmp/switch.dat" ]; then
		gnuplot <<EOF
set terminal pngcairo size 760,420 font "sans,10"
set output "docs/img/conference-switch.png"
set title "Layer-switch delay: request to the first frame of the new layer (loopback)"
set xlabel "delay (ms)"
set ylabel "fraction of switches"
set yrange [0:1]
set xrange [0:*]
set grid
set key bottom right
set arrow from 150, graph 0 to 150, graph 1 nohead dt 2 lc rgb "#999999"
set label "goal 150 ms" at 155, 0.1
plot "$tmp/switch.dat" using 1:2 with steps lw 2 lc rgb "#4477aa" title "Pion publisher and receivers"
EOF
	fi
else
	echo "run.sh: gnuplot missing (apt-get install gnuplot-nox): plots not redrawn" >&2
fi

python3 - "$DOC" "$SECTION" "$tmp/section" <<'EOF'
import sys, os
doc, head, new = sys.argv[1], sys.argv[2], open(sys.argv[3]).read().rstrip("\n") + "\n"
text = open(doc).read() if os.path.exists(doc) else "# Benchmarks\n"
lines = text.split("\n")
start = next((i for i, l in enumerate(lines) if l.strip() == head), None)
if start is None:
    out = text.rstrip("\n") + "\n\n" + new
else:
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    rest = "\n".join(lines[end:])
    out = "\n".join(lines[:start]) + ("\n" if start else "") + new + ("\n" + rest if rest.strip() else "")
open(doc, "w").write(out)
EOF
echo "run.sh: wrote the section \"$SECTION\" of $DOC" >&2
