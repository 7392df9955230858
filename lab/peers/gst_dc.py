#!/usr/bin/env python3
"""GStreamer's webrtcbin as the sender of a `petrel lab` data channel run
(the `gstreamer` stack; its SCTP is the usrsctp of the published study):
offers a "bulk" and a "probe" data channel to the lab's answerer over its
TCP signaling (one JSON line each way, as lab/dc.go and
lab/browser/dcpeer.mjs), sends bulk messages while buffered-amount is under
--high (again when it falls to --low), a stamped 64-byte probe every 10 ms,
and stops when the receiver writes "done" or closes. With --reverse true
(the `to-gstreamer` stack) Petrel sends on those channels and this
measures (labpeer.py) and prints the Result JSON.

  /usr/bin/python3 gst_dc.py --addr 10.201.0.2:7000 --probe ordered
      [--msgsize 65536 --high 2097152 --low 1048576 --duration 10 --reverse true]

Runs under the system Python (Debian's python3-gi), as test/interop's
GStreamer peers do.
"""

import json
import os
import socket
import sys
import threading
import time

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstSdp", "1.0")
gi.require_version("GstWebRTC", "1.0")
from gi.repository import GLib, Gst, GstSdp, GstWebRTC  # noqa: E402

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
from labpeer import Meter, parse_args, probe_message  # noqa: E402

# The interop tests' webrtcbin peers put gathered candidates into a
# non-trickle offer; this one does it the same way.
sys.path.insert(0, os.path.join(here, "..", "..", "test", "interop"))
from gst_viewer import add_candidates  # noqa: E402

PROBE_INIT = {
    "ordered": "application/data-channel, ordered=(boolean)true",
    "unordered": "application/data-channel, ordered=(boolean)false",
    "partial": "application/data-channel, ordered=(boolean)false, max-retransmits=(int)0",
}


def log(*a):
    print("gst_dc:", *a, file=sys.stderr, flush=True)


def promised(webrtc, signal, *args):
    """Emits an action signal that answers through a promise, and waits. The
    promise's reply owns what it holds: keep both while that is used."""
    p = Gst.Promise.new()
    webrtc.emit(signal, *args, p)
    p.wait()
    return p


def connect(host, port):
    for _ in range(50):
        try:
            return socket.create_connection((host, port))
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"cannot reach {host}:{port}")


def run(args):
    Gst.init(None)
    host, port = args.addr.rsplit(":", 1)
    pipe = Gst.Pipeline.new("sender")
    webrtc = Gst.ElementFactory.make("webrtcbin", "send")
    if webrtc is None:
        raise RuntimeError("no webrtcbin (gstreamer1.0-plugins-bad, gstreamer1.0-nice)")
    webrtc.set_property("bundle-policy", GstWebRTC.WebRTCBundlePolicy.MAX_BUNDLE)
    pipe.add(webrtc)
    cands = []
    webrtc.connect("on-ice-candidate", lambda _el, m, c: cands.append((m, c)))
    pipe.set_state(Gst.State.PLAYING)

    bulk = webrtc.emit("create-data-channel", "bulk", None)
    probe = None
    if args.probe != "none":
        probe = webrtc.emit("create-data-channel", "probe", Gst.Structure.from_string(PROBE_INIT[args.probe])[0])
    if bulk is None or (args.probe != "none" and probe is None):
        raise RuntimeError("create-data-channel failed")
    opened = threading.Event()
    low = threading.Event()
    bulk.connect("on-open", lambda _ch: opened.set())
    bulk.connect("on-error", lambda _ch, err: log("bulk channel:", err))
    bulk.set_property("buffered-amount-low-threshold", args.low)
    bulk.connect("on-buffered-amount-low", lambda _ch: low.set())

    created = promised(webrtc, "create-offer", None)
    reply = created.get_reply()  # holds the offer: keep it
    offer = reply.get_value("offer")
    if offer is None:
        raise RuntimeError("create-offer failed")
    promised(webrtc, "set-local-description", offer)
    deadline = time.monotonic() + 10
    while webrtc.get_property("ice-gathering-state") != GstWebRTC.WebRTCICEGatheringState.COMPLETE:
        if time.monotonic() > deadline:
            raise TimeoutError("ICE gathering did not complete")
        time.sleep(0.02)
    sdp = add_candidates(webrtc.get_property("local-description").sdp.as_text(), cands)

    sock = connect(host, int(port))
    rf = sock.makefile("r")
    sock.sendall((json.dumps({"type": "offer", "sdp": sdp}) + "\n").encode())
    answer = json.loads(rf.readline())
    res, msg = GstSdp.SDPMessage.new_from_text(answer["sdp"])
    if res != GstSdp.SDPResult.OK:
        raise ValueError("unparsable answer SDP")
    meter = None
    if args.reverse == "true":
        meter = Meter(args.duration, args.probe)
        bulk.connect("on-message-data", lambda _ch, data: meter.bulk(data.get_size()))
        if probe is not None:
            probe.connect("on-message-data", lambda _ch, data: meter.probe(data.get_data()))
    promised(webrtc, "set-remote-description", GstWebRTC.WebRTCSessionDescription.new(GstWebRTC.WebRTCSDPType.ANSWER, msg))
    if meter is not None:
        meter.done.wait(args.duration + 60)
        print(json.dumps(meter.result()), flush=True)
        sock.sendall(b'"done"\n')
        sock.close()
        pipe.set_state(Gst.State.NULL)
        return

    stop = threading.Event()

    def send_bulk():
        if not opened.wait(30):
            log("bulk channel did not open")
            return
        data = GLib.Bytes.new(bytes(args.msgsize))
        while not stop.is_set():
            if bulk.get_property("buffered-amount") >= args.high:
                low.clear()
                if bulk.get_property("buffered-amount") >= args.high:
                    low.wait(0.05)
                continue
            bulk.emit("send-data", data)

    def send_probes():
        seq = 0
        while not stop.wait(0.01):
            if probe.get_property("ready-state") != GstWebRTC.WebRTCDataChannelState.OPEN:
                continue
            probe.emit("send-data", GLib.Bytes.new(probe_message(seq)))
            seq += 1

    threads = [threading.Thread(target=send_bulk, daemon=True)]
    if probe is not None:
        threads.append(threading.Thread(target=send_probes, daemon=True))
    for t in threads:
        t.start()
    rf.readline()  # "done" or close
    stop.set()
    for t in threads:
        t.join(2)
    sock.close()
    pipe.set_state(Gst.State.NULL)


def main():
    args = parse_args()
    timer = threading.Timer(args.duration + 90, lambda: (log("timeout"), os._exit(1)))
    timer.daemon = True
    timer.start()
    try:
        run(args)
    except Exception as e:
        log(repr(e))
        sys.exit(1)


if __name__ == "__main__":
    main()
