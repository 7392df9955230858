#!/usr/bin/env bash
# bench/cluster/run.sh: the cluster benchmark. A room spread over three
# `petrel serve` nodes sharing a Redis (redis-server from Debian) against the
# same room on one node, and selective forwarding between nodes against
# forwarding every layer. Rewrites the section "## Cluster: cascaded rooms" of
# docs/benchmarks.md (and nothing else in it).
#
#   bench/cluster/run.sh                          # 6 publishers + 24 viewers, 15 s windows
#   PUBLISHERS=6 VIEWERS=54 bench/cluster/run.sh  # the room of 60 (needs more than 2 cores)
#   REPORT_ONLY=1 bench/cluster/run.sh            # rewrite the section from results/ only
#
# Raw results: bench/cluster/results/runs.jsonl and meta.env.
set -euo pipefail
cd "$(dirname "$0")/../.."

PUBLISHERS=${PUBLISHERS:-6}
VIEWERS=${VIEWERS:-24}
DURATION=${DURATION:-15s}
RUNS=${RUNS:-1}
OUT=bench/cluster/results
DOC=docs/benchmarks.md
SECTION="## Cluster: cascaded rooms"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$OUT"

if [ -z "${REPORT_ONLY:-}" ]; then
	command -v redis-server >/dev/null || { echo "run.sh: redis-server missing (apt-get install redis-server)" >&2; exit 1; }
	go build -o "$tmp/petrel" ./cmd/petrel
	go build -o "$tmp/bench" ./bench/cluster
	{
		echo "STARTED=$(date -u +"%Y-%m-%d %H:%M UTC")"
		echo "COMMIT=$(git rev-parse --short HEAD)"
		echo "LOAD=$(cut -d' ' -f1-3 /proc/loadavg)"
		echo "CORES=$(nproc)"
		echo "PUBLISHERS=$PUBLISHERS"
		echo "VIEWERS=$VIEWERS"
		echo "DURATION=$DURATION"
	} >"$tmp/meta.env"
	: >"$tmp/runs.jsonl"
	for run in $(seq "$RUNS"); do
		# Interleaved, so that a change in the machine's load hits every mode.
		for mode in selective all single; do
			echo "run.sh: $mode, run $run of $RUNS" >&2
			case $mode in
			selective) args=(-nodes 3) ;;
			all) args=(-nodes 3 -forward-all) ;;
			single) args=(-nodes 1) ;;
			esac
			"$tmp/bench" -bin "$tmp/petrel" "${args[@]}" -publishers "$PUBLISHERS" -viewers "$VIEWERS" -duration "$DURATION" >>"$tmp/runs.jsonl"
		done
	done
	cp "$tmp/runs.jsonl" "$OUT/runs.jsonl"
	cp "$tmp/meta.env" "$OUT/meta.env"
fi

python3 bench/cluster/report.py "$OUT/runs.jsonl" "$OUT/meta.env" >"$tmp/section"
python3 - "$DOC" "$SECTION" "$tmp/section" <<'PY'
import sys
doc, title, new = sys.argv[1], sys.argv[2], open(sys.argv[3]).read()
text = open(doc).read()
start = text.find(title + "\n")
if start < 0:
    text = text.rstrip("\n") + "\n\n" + new
else:
    end = text.find("\n## ", start + len(title))
    text = text[:start] + new + (text[end + 1:] if end >= 0 else "")
open(doc, "w").write(text)
PY
echo "run.sh: wrote the section \"$SECTION\" of $DOC" >&2
