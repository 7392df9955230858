#!/usr/bin/env python3
"""Renders bench/cluster results as the "Cluster: cascaded rooms" section of docs/benchmarks.md."""
import json
import statistics
import sys

runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
meta = dict(l.strip().split("=", 1) for l in open(sys.argv[2]) if "=" in l)


def med(mode, key):
    vals = [r[key] for r in runs if r["mode"] == mode]
    return statistics.median(vals) if vals else float("nan")


modes = []
for r in runs:
    if r["mode"] not in modes:
        modes.append(r["mode"])
room = int(meta.get("PUBLISHERS", 0)) + int(meta.get("VIEWERS", 0))
out = []
out.append("## Cluster: cascaded rooms\n")
out.append(
    f"`bench/cluster/run.sh` ({meta.get('STARTED')}, commit {meta.get('COMMIT')}, {meta.get('CORES')} cores, "
    f"load average {meta.get('LOAD')} at the start: other engineers' work shares the machine). "
    f"One room of {room}: {meta.get('PUBLISHERS')} publishers of a three-layer simulcast VP8 track "
    "(about 150, 500 and 1500 kbit/s) and "
    f"{meta.get('VIEWERS')} viewers, every participant in a speaker view (the top layer of one "
    "participant, the low layer of the others), spread evenly over three `petrel serve` processes "
    "sharing a Redis, against the same room on one node. Pion clients in one process; "
    f"{meta.get('DURATION')} windows, median of {len(runs) // max(len(modes), 1)} run(s).\n"
)
out.append(
    "Scaled down from the issue's room of 60 because two shared cores cannot run 60 Pion clients, "
    "three servers and Redis at once; `PUBLISHERS=6 VIEWERS=54 bench/cluster/run.sh` runs the full size.\n"
)
out.append("| setup | bytes over node links (kbit/s) | CPU per node (cores) | CPU, all nodes (cores) | packets/s received by participants |")
out.append("|---|---:|---|---:|---:|")
for m in modes:
    cpus = [r["nodeCpu"] for r in runs if r["mode"] == m]
    per = " / ".join(f"{statistics.median(c[i] for c in cpus):.2f}" for i in range(len(cpus[0])))
    out.append(
        f"| {m} | {med(m, 'linkKbps'):.0f} | {per} | {med(m, 'cpuTotal'):.2f} | {med(m, 'viewerKpps') * 1000:.0f} |"
    )
sel = med("3 nodes, selective", "linkKbps")
allk = med("3 nodes, every layer crosses", "linkKbps")
out.append("")
if sel == sel and allk == allk and allk > 0:
    out.append(
        f"Selective forwarding sends {sel / allk * 100:.0f}% of the bytes that forwarding every layer "
        "sends between nodes: a node receives the top layer only of the tracks some participant there "
        "shows large, and nothing of tracks nobody there receives (Last-N, hidden tiles). "
        f"Participants received {med('3 nodes, selective', 'viewerKpps') * 1000:.0f} and "
        f"{med('3 nodes, every layer crosses', 'viewerKpps') * 1000:.0f} packets/s: selection cost them no media."
    )
one = med("one node", "cpuTotal")
three = med("3 nodes, selective", "cpuTotal")
if one == one and three == three and one > 0:
    out.append(
        f"Three nodes use {three:.2f} cores together against {one:.2f} for one node holding everyone "
        f"({three / one:.1f}x): each node still receives every track it forwards, once per link, and "
        "links add DTLS and SCTP work; in return no node carries the whole room, and each node's share "
        "is what a deployment scales by."
    )
out.append(
    "\nNot measured yet: end-to-end delay with RTT-based against nearest-node placement in an emulated "
    "three-region topology (placement itself is unit-tested in `cluster/place_test.go` on a "
    "three-region RTT matrix; the `netem/` namespaces are not wired into this benchmark).\n"
)
print("\n".join(out))
