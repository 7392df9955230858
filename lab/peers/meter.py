"""What a `petrel lab` receiver measures (lab/peer.go's Result, as
lab/browser/dcpeer.mjs's measure does in the page): the bulk channel's
payload bytes for --duration seconds from its first message, in 0.25 s
steps, and the one-way delay of the stamped probes that arrive in that
window. Shared by the aiortc and GStreamer peers; thread-safe, since
webrtcbin calls back from its own threads."""

import struct
import threading
import time

STEP = 0.25


class Meter:
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
