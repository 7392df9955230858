"""What the aiortc and GStreamer peers of `petrel lab` share: their flags
(those lab/browser/dcpeer.mjs takes), the stamped probe, and Meter, what a
receiver measures."""

import argparse
import struct
import threading
import time

STEP = 0.25


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--addr", default="10.201.0.2:7000")
    p.add_argument("--probe", default="ordered")
    p.add_argument("--msgsize", type=int, default=65536)
    p.add_argument("--high", type=int, default=2 * 1024 * 1024)
    p.add_argument("--low", type=int, default=1024 * 1024)
    p.add_argument("--duration", type=int, default=10)
    p.add_argument("--reverse", default="false")
    return p.parse_args()


def probe_message(seq):
    """A 64-byte probe: its sequence number and the wall-clock ns it was
    sent at, the clock the receiver compares with (lab/peer.go)."""
    msg = bytearray(64)
    struct.pack_into(">QQ", msg, 0, seq, time.time_ns())
    return bytes(msg)


class Meter:
    """What a receiver measures (lab/peer.go's Result, as dcpeer.mjs's
    measure does in the page): the bulk channel's payload bytes for
    duration seconds from its first message, in 0.25 s steps, and the
    one-way delay of the stamped probes that arrive in that window.
    Thread-safe: webrtcbin calls back from its own threads."""

    def __init__(self, duration, probe_mode):
        self.duration = duration
        self.probe_mode = probe_mode
        self.series = [0] * round(duration / STEP)
        self.bytes = 0
        self.start = None
        self.delays = []
        self.max_seq = 0
        self.got = 0
        self.done = threading.Event()
        self.lock = threading.Lock()

    def _elapsed(self):
        return time.monotonic() - self.start

    def bulk(self, n):
        with self.lock:
            if self.start is None:
                self.start = time.monotonic()
                threading.Timer(self.duration, self.done.set).start()
            el = self._elapsed()
            if el >= self.duration:
                return
            self.bytes += n
            self.series[min(int(el / STEP), len(self.series) - 1)] += n

    def probe(self, msg):
        now = time.time_ns()
        if len(msg) < 16:
            return
        seq, sent = struct.unpack_from(">QQ", msg, 0)
        with self.lock:
            if self.start is None or self._elapsed() >= self.duration:
                return
            self.delays.append((now - sent) / 1e6)
            self.got += 1
            self.max_seq = max(self.max_seq, seq + 1)

    def result(self):
        with self.lock:
            d = sorted(self.delays)
            return {
                "probe": self.probe_mode,
                "bytes": self.bytes,
                "seconds": self.duration,
                "mbps": self.bytes * 8 / 1e6 / self.duration,
                "series": [b * 8 / 1e6 / STEP for b in self.series],
                "series_step": STEP,
                "probe_sent": self.max_seq,
                "probe_got": self.got,
                "p50_ms": d[len(d) // 2] if d else 0,
                "p99_ms": d[min(len(d) - 1, int(len(d) * 0.99))] if d else 0,
            }
