#!/usr/bin/env python3
"""aiortc as the sender of a `petrel lab` data channel run (the `aiortc`
stack): offers a "bulk" and a "probe" data channel to the lab's answerer
over its TCP signaling (one JSON line each way, as lab/dc.go and
lab/browser/dcpeer.mjs), sends bulk messages while bufferedAmount is under
--high (again when it falls to --low), a stamped 64-byte probe every 10 ms,
and stops when the receiver writes "done" or closes. With --reverse true
(the `to-aiortc` stack) Petrel sends on those channels and this measures
(labpeer.py) and prints the Result JSON.

  python3 aiortc_dc.py --addr 10.201.0.2:7000 --probe ordered
      [--msgsize 65536 --high 2097152 --low 1048576 --duration 10 --reverse true]

aiortc's SCTP is its own, in Python (aiortc/rtcsctptransport.py).
"""

import asyncio
import json
import os
import sys

from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from labpeer import Meter, parse_args, probe_message  # noqa: E402


def log(*a):
    print("aiortc_dc:", *a, file=sys.stderr, flush=True)


def probe_init(mode):
    if mode == "unordered":
        return {"ordered": False}
    if mode == "partial":
        return {"ordered": False, "maxRetransmits": 0}
    return {"ordered": True}


async def connect(host, port):
    for _ in range(50):
        try:
            return await asyncio.open_connection(host, port)
        except OSError:
            await asyncio.sleep(0.1)
    raise RuntimeError(f"cannot reach {host}:{port}")


async def run(args):
    host, port = args.addr.rsplit(":", 1)
    # No iceServers: aiortc's default is a public STUN server, and the lab's
    # hosts reach nothing but each other.
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    bulk = pc.createDataChannel("bulk")
    probe = pc.createDataChannel("probe", **probe_init(args.probe)) if args.probe != "none" else None
    await pc.setLocalDescription(await pc.createOffer())  # gathers all candidates
    reader, writer = await connect(host, int(port))
    writer.write((json.dumps({"type": pc.localDescription.type, "sdp": pc.localDescription.sdp}) + "\n").encode())
    await writer.drain()
    line = await reader.readline()
    if not line:
        raise RuntimeError("signaling closed before the answer")
    answer = json.loads(line)
    meter = None
    if args.reverse == "true":
        meter = Meter(args.duration, args.probe)
        bulk.on("message", lambda m: meter.bulk(len(m)))
        if probe:
            probe.on("message", meter.probe)
    await pc.setRemoteDescription(RTCSessionDescription(sdp=answer["sdp"], type=answer["type"]))
    if meter is not None:
        while not meter.done.is_set():
            await asyncio.sleep(0.05)
        print(json.dumps(meter.result()), flush=True)
        writer.write(b'"done"\n')
        await writer.drain()
        writer.close()
        await pc.close()
        return

    chunk = bytes(args.msgsize)

    def fill():
        while bulk.readyState == "open" and bulk.bufferedAmount < args.high:
            bulk.send(chunk)

    bulk.bufferedAmountLowThreshold = args.low
    bulk.on("open", fill)
    bulk.on("bufferedamountlow", fill)

    async def probes():
        seq = 0
        while True:
            await asyncio.sleep(0.01)
            if probe.readyState != "open":
                continue
            probe.send(probe_message(seq))
            seq += 1

    task = asyncio.ensure_future(probes()) if probe else None
    await reader.readline()  # "done" or close
    if task:
        task.cancel()
    writer.close()
    await pc.close()


def main():
    args = parse_args()
    try:
        asyncio.run(asyncio.wait_for(run(args), args.duration + 90))
    except Exception as e:
        log(repr(e))
        sys.exit(1)


if __name__ == "__main__":
    main()
