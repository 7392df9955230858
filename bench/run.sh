#!/usr/bin/env bash
# bench/run.sh: measure Petrel's forwarding cost and rewrite the section
# "## Forwarding: CPU per packet" of docs/benchmarks.md (and nothing else in it).
#
#   bench/run.sh                      # N = 10 25 50 100, 3 runs each, 20 s windows
#   NS="50" RUNS=1 bench/run.sh       # quick look
#   REPORT_ONLY=1 bench/run.sh        # rewrite the section from bench/results/ (no measuring)
#
# Steps: build bench/cmd/benchserver (`petrel serve` plus a pprof port) and
# bench/cmd/fanout; run the floor benchmarks (bench/floor_test.go); run the
# fan-out for each N (a fresh server process per run, medians of RUNS); take CPU
# profiles of one more run at PROFILE_N; plot CPU-µs/packet against N; write the
# section. Raw outputs go to bench/results/.
#
# The plot needs gnuplot. It is installed here from Debian if missing
# (apt-get install gnuplot-nox); python3-matplotlib is not needed.
set -euo pipefail
cd "$(dirname "$0")/.."

NS=${NS:-"10 25 50 100"}
RUNS=${RUNS:-3}
DURATION=${DURATION:-20s}
PROFILE_N=${PROFILE_N:-100}
# One more N where the subscribers' tokens also grant publish (empty: skip).
PUBGRANT_N=${PUBGRANT_N:-100}
OUT=bench/results
DOC=docs/benchmarks.md
SECTION="## Forwarding: CPU per packet"

if ! command -v gnuplot >/dev/null; then
	echo "run.sh: installing gnuplot-nox from Debian for the plot" >&2
	apt-get install -y gnuplot-nox >/dev/null
fi

mkdir -p "$OUT"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/benchserver" ./bench/cmd/benchserver
go build -o "$tmp/fanout" ./bench/cmd/fanout

if [ -z "${REPORT_ONLY:-}" ]; then
# Results are written in a private directory and copied into bench/results/ at
# the end, so that another run.sh started meanwhile cannot truncate them.
RES="$tmp/results"
mkdir -p "$RES"
# What was measured: the commit, and whether the server's packages differed from it.
built="$(git rev-parse --short HEAD)"
if ! git diff --quiet HEAD -- sfu rtc signal server client config metrics 2>/dev/null; then
	built="$built plus uncommitted changes in the server's packages"
fi
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
started=$(date -u +"%Y-%m-%d %H:%M UTC")

# 1. The floor. Medians over RUNS runs of each benchmark.
echo "run.sh: floor benchmarks" >&2
go test -run '^$' -bench 'Floor' -benchmem -count "$RUNS" ./bench/ | tee "$RES/floor.txt" >&2
# name, median ns/op, median cpu-ns/op, median allocs/op
awk '/^BenchmarkFloor/ {
	name = $1; sub(/-[0-9]+$/, "", name); sub(/^Benchmark/, "", name)
	for (i = 2; i <= NF; i++) {
		if ($i == "ns/op") ns[name] = ns[name] " " $(i-1)
		if ($i == "cpu-ns/op") cpu[name] = cpu[name] " " $(i-1)
		if ($i == "allocs/op") al[name] = al[name] " " $(i-1)
	}
	if (!(name in seen)) { seen[name] = 1; order[++k] = name }
}
function median(s,   a, n, i, j, t) {
	n = split(s, a, " ")
	for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
	return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
END { for (i = 1; i <= k; i++) printf "%s %.0f %.0f %s\n", order[i], median(ns[order[i]]), median(cpu[order[i]]), median(al[order[i]]) }' "$RES/floor.txt" >"$RES/floor-medians.txt"
# The ratio uses what Petrel does for these clients (Pion peers negotiate
# AES-256-GCM; a 1200-byte packet is a full video packet), in CPU time, which
# is what the fan-out measures of the server too.
FLOOR_NS=$(awk '$1 == "FloorSend/AES256GCM" { print $3 }' "$RES/floor-medians.txt")

# 2. The fan-out.
: >"$RES/fanout-rows.md"
: >"$RES/fanout.log"
for n in $NS; do
	echo "run.sh: fan-out N=$n ($RUNS runs of $DURATION)" >&2
	"$tmp/fanout" -server "$tmp/benchserver" -n "$n" -runs "$RUNS" -duration "$DURATION" -floor-ns "$FLOOR_NS" \
		>>"$RES/fanout-rows.md" 2> >(tee -a "$RES/fanout.log" >&2)
done

: >"$RES/fanout-rows-pubgrant.md"
for n in $PUBGRANT_N; do
	echo "run.sh: fan-out N=$n, subscribers with the publish grant ($RUNS runs of $DURATION)" >&2
	"$tmp/fanout" -server "$tmp/benchserver" -n "$n" -runs "$RUNS" -duration "$DURATION" -floor-ns "$FLOOR_NS" -sub-publish \
		>>"$RES/fanout-rows-pubgrant.md" 2> >(tee -a "$RES/fanout.log" >&2)
done

# 3. Profiles: the steady-state window, and the same participants joined but
# not subscribed.
echo "run.sh: profiles at N=$PROFILE_N" >&2
"$tmp/fanout" -server "$tmp/benchserver" -n "$PROFILE_N" -runs 1 -duration "$DURATION" \
	-cpuprofile "$RES/fanout-n$PROFILE_N-window.pprof" -idleprofile "$RES/fanout-n$PROFILE_N-idle.pprof" \
	-heapprofile "$RES/fanout-n$PROFILE_N-heap.pprof" \
	>"$tmp/profile-row" 2> >(tee -a "$RES/fanout.log" >&2)
for p in window idle; do
	go tool pprof -top -cum -nodecount 40 "$tmp/benchserver" "$RES/fanout-n$PROFILE_N-$p.pprof" 2>/dev/null >"$RES/fanout-n$PROFILE_N-$p-cum.txt"
	go tool pprof -top -nodecount 25 "$tmp/benchserver" "$RES/fanout-n$PROFILE_N-$p.pprof" 2>/dev/null >"$RES/fanout-n$PROFILE_N-$p-flat.txt"
done
go tool pprof -top -cum -sample_index=inuse_space -nodecount 40 "$tmp/benchserver" "$RES/fanout-n$PROFILE_N-heap.pprof" 2>/dev/null >"$RES/fanout-n$PROFILE_N-heap-cum.txt"
go tool pprof -top -sample_index=inuse_space -nodecount 25 "$tmp/benchserver" "$RES/fanout-n$PROFILE_N-heap.pprof" 2>/dev/null >"$RES/fanout-n$PROFILE_N-heap-flat.txt"

load_after=$(cut -d' ' -f1-3 /proc/loadavg)
printf 'started="%s"\nbuilt="%s"\nload_before="%s"\nload_after="%s"\nRUNS=%s\nDURATION=%s\nPROFILE_N=%s\n' \
	"$started" "$built" "$load_before" "$load_after" "$RUNS" "$DURATION" "$PROFILE_N" >"$RES/meta.env"
cp "$RES"/* "$OUT"/
fi
. "$OUT/meta.env"
FLOOR_NS=$(awk '$1 == "FloorSend/AES256GCM" { print $3 }' "$OUT/floor-medians.txt")

# 4. The plot: CPU-µs per packet against N, total and media path, and the floor.
awk -F'|' '{ gsub(/ /, ""); print $2, $5, $7 }' "$OUT/fanout-rows.md" >"$tmp/plot.dat"
gnuplot <<EOF
set terminal pngcairo size 800,500 font ",11" noenhanced
set output "$OUT/fanout-cpu.png"
set title "Petrel forwarding cost: 1 publisher (VP8 500 kbit/s + Opus) to N subscribers, loopback, 2 cores"
set xlabel "subscribers (N)"
set ylabel "server CPU-µs per forwarded packet"
set yrange [0:*]
set key top right
set grid
plot "$tmp/plot.dat" using 1:2 with linespoints lw 2 pt 7 title "all server CPU / packets out", \
     "$tmp/plot.dat" using 1:3 with linespoints lw 2 pt 5 title "media path (above N idle participants)", \
     $FLOOR_NS/1000.0 with lines dt 2 lw 2 title "floor: AES-256-GCM + send(2) of 1200 B, CPU time"
EOF

# 5. The section.
{
	echo "$SECTION"
	echo
	echo "_Written by \`bench/run.sh\` on $started, server built from ${built:-?}: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), KVM guest), $(go version | cut -d' ' -f3), Linux $(uname -r). The machine is shared and noisy: load average $load_before before, $load_after after (other sessions build and test on it). Every figure is the median of $RUNS runs; compare ratios within one run of this script, not absolute values across runs._"
	echo
	echo "### The floor (\`go test -run '^\$' -bench Floor -benchmem ./bench/\`)"
	echo
	echo "What one packet costs with nothing but the unavoidable work, 1200-byte RTP packet, pion/srtp/v3 $(go list -m -f '{{.Version}}' github.com/pion/srtp/v3)."
	echo
	echo "| benchmark | what | CPU-ns/op | wall ns/op | allocs/op |"
	echo "|---|---|---:|---:|---:|"
	while read -r name ns cpu allocs; do
		case $name in
		FloorEncrypt/*) what="SRTP protect only" ;;
		FloorSend/*) what="SRTP protect + send(2) on a connected loopback socket, reader draining on another goroutine" ;;
		FloorSendTo/*) what="the same with sendto(2) on an unconnected socket (what a shared ICE UDP mux does)" ;;
		FloorSendmmsg/*) what="SRTP protect + sendmmsg(2) of 50 packets per call (batched fan-out), per packet" ;;
		FloorReceive/*) what="recv(2) + SRTP unprotect (the load generator's floor per received packet)" ;;
		*) what="" ;;
		esac
		echo "| $name | $what | $cpu | $ns | $allocs |"
	done <"$OUT/floor-medians.txt"
	echo
	echo "_CPU-ns/op_ is the benchmark thread's own CPU time per packet (getrusage RUSAGE_THREAD), which descheduling on a loaded machine does not inflate; on loopback the kernel's delivery to the receiving socket happens inside send(2) and is counted. _Wall ns/op_ is Go's usual figure and is inflated by the machine's load. The ratio columns below divide by **FloorSend/AES256GCM = $FLOOR_NS CPU-ns**: Pion peers (the benchmark's clients and Petrel) negotiate AES-256-GCM, and the fan-out measures the server in CPU time too."
	echo
	echo "### Fan-out: one publisher, N subscribers (\`go run ./bench/cmd/fanout -n N -runs $RUNS -duration $DURATION\`)"
	echo
	echo "Publisher: VP8-like video at 30 fps (1800-byte frames and an 8000-byte keyframe every second, about 480 kbit/s, 65 packets/s at Pion's 1200-byte MTU) and Opus-like audio (80-byte frames, 50 packets/s), so about 115 packets/s in and 115·N out; _bytes/packet_ is RTP header and payload as the subscribers received them. Subscribers are viewers (tokens that grant subscribe and data, not publish) and lean Pion clients of the room protocol (no interceptors; they read RTP and count), all in the driver process; Petrel (\`bench/cmd/benchserver\`, i.e. \`server.Start\` as in \`petrel serve\`) is a separate process, so its utime+stime from \`/proc/PID/stat\` is the server alone. Packets out are the exact sum of the server's DownTrack counters (admin API) over the $DURATION window; \`/metrics\` \`petrel_packets_total{direction=\"out\"}\` is logged beside them in \`bench/results/fanout.log\` but moves in steps of 128 received packets per track. RSS/subscriber is (RSS after the window − RSS with the publisher alone) / N. _Media path_ is the CPU above the same N participants joined but not yet subscribed, over packets out; _idle CPU per participant_ is that joined-but-unsubscribed CPU above the publisher alone, per participant."
	echo
	"$tmp/fanout" -header-only
	cat "$OUT/fanout-rows.md"
	echo
	if [ -s "$OUT/fanout-rows-pubgrant.md" ]; then
		echo "The same with subscribers whose tokens also grant publish (Petrel then gives their publisher connections the media interceptors, NACK generator, receiver reports and TWCC, although they publish nothing; \`-sub-publish\`):"
		echo
		"$tmp/fanout" -header-only
		cat "$OUT/fanout-rows-pubgrant.md"
		echo
	fi
	echo "![CPU-µs per forwarded packet against N](../bench/results/fanout-cpu.png)"
	echo
	echo "### Where the time goes (pprof, N = $PROFILE_N, $DURATION window)"
	echo
	echo "Profiles: \`bench/results/fanout-n$PROFILE_N-window.pprof\` (steady state) and \`bench/results/fanout-n$PROFILE_N-idle.pprof\` (the same participants joined, not subscribed); \`go tool pprof -top -cum\` of each is beside them. Top of the steady-state profile by cumulative time:"
	echo
	echo '```'
	sed -n '1,8p' "$OUT/fanout-n$PROFILE_N-window-cum.txt" | grep -E '^(Duration|Showing nodes)' || true
	grep -E 'sfu\.\(\*Publication\)\.forward|sfu\.\(\*layer\)\.forward|Publication\)\.fanout|taskloop\.\(\*Loop\)\.runLoop|UDPMuxDefault\)\.connWorker|sfu\.\(\*DownTrack\)\.writeRTP|SessionSRTP\)\.writeRTP|mux\.\(\*Endpoint\)\.Write|ice/v4\.\(\*Conn\)\.Write|syscall\.sendto$|srtp/v3\.\(\*Context\)\.encryptRTP|GCM\)\.Seal|runtime\.park_m|runtime\.findRunnable|nack\.\(\*GeneratorInterceptor\)\.loop|taskloop\.\(\*Loop\)\.runLoop|twcc\.\(\*SenderInterceptor\)\.loop|runtime\.gcBgMarkWorker|runtime\.mallocgc$' \
		"$OUT/fanout-n$PROFILE_N-window-cum.txt" || true
	echo '```'
	echo
	cat bench/forwarding-analysis.md
} >"$tmp/section"

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
