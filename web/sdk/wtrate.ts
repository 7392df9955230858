// Send-rate control for WebTransport video: WebCodecs encoders have no
// congestion controller of their own, so the publisher turns the congestion
// signals into an encoder bitrate and a resolution scale.
//
// Signals, each optional: the receiver's loss fraction (from the receiver
// reports the subscriber sends, relayed by the server), the share of our own
// datagrams the browser dropped before sending (QUIC's congestion window was
// full: `getStats().datagrams.droppedOutgoing`/`expiredOutgoing`), the send
// queue (bytes written and not yet sent; streams), and QUIC's own estimate
// (`estimatedSendRate`, where the browser reports it). Loss-based AIMD in the
// style of GCC's loss controller, capped by QUIC's estimate.
//
// Pure logic; unit-tested in Node.

export interface RateSignals {
  /** Fraction (0..1) of media lost on the way, from receiver reports. */
  lossFraction?: number;
  /** Fraction (0..1) of datagrams the browser dropped or expired before sending. */
  dropFraction?: number;
  /** QUIC's estimated send rate, bit/s. */
  estimatedBps?: number;
  /** Bytes queued in the send path beyond what a frame interval carries. */
  queuedBytes?: number;
  /** Smoothed RTT, ms. */
  rttMs?: number;
  /** Lowest RTT QUIC has seen, ms: the path without queues. */
  minRttMs?: number;
}

export interface RateOptions {
  minBps?: number;
  maxBps?: number;
  startBps?: number;
}

export interface RateDecision {
  bitrate: number;
  /** Divide the source width and height by this (1, 2 or 4). */
  scale: number;
}

export class RateController {
  private bps: number;
  private readonly min: number;
  private readonly max: number;
  private lastUpdate = 0;
  private lastDecrease = 0;
  private scale = 1;

  constructor(o: RateOptions = {}) {
    this.min = o.minBps ?? 50_000;
    this.max = o.maxBps ?? 2_500_000;
    this.bps = Math.min(this.max, o.startBps ?? 800_000);
  }

  get bitrate(): number {
    return this.bps;
  }

  /** Feeds one interval's signals (call about every 200–500 ms). */
  update(s: RateSignals, now: number): RateDecision {
    const dt = this.lastUpdate ? Math.min(2_000, now - this.lastUpdate) : 0;
    this.lastUpdate = now;
    const loss = Math.max(s.lossFraction ?? 0, s.dropFraction ?? 0);
    const rtt = s.rttMs ?? 100;
    const queued = (s.queuedBytes ?? 0) * 8; // bits waiting to go
    // A queue building at the bottleneck shows as RTT above the path's minimum
    // long before anything is dropped (a deep buffer holds seconds at a low rate).
    const queueing = s.rttMs !== undefined && s.minRttMs !== undefined && s.rttMs - s.minRttMs > Math.max(100, s.minRttMs);
    if (loss > 0.1 || queued > this.bps * 0.3 || queueing) {
      // At most one decrease per RTT (plus a little), so one loss burst is one step.
      if (now - this.lastDecrease > rtt + 100) {
        const f = loss > 0.1 ? 1 - 0.5 * loss : 0.8;
        this.bps *= Math.max(0.5, f);
        this.lastDecrease = now;
      }
    } else if (loss < 0.02 && !(s.rttMs !== undefined && s.minRttMs !== undefined && s.rttMs - s.minRttMs > Math.max(50, 0.5 * s.minRttMs))) {
      // Multiplicative growth far from the last decrease, additive near it.
      const sinceDrop = now - this.lastDecrease;
      const g = sinceDrop > 4_000 ? 0.08 : 0.03;
      this.bps *= 1 + (g * dt) / 1000;
    }
    if (s.estimatedBps && s.estimatedBps > 0) this.bps = Math.min(this.bps, 0.9 * s.estimatedBps);
    this.bps = Math.max(this.min, Math.min(this.max, this.bps));
    // Fewer pixels at low rates: a 640x480 VP8 picture below ~250 kbit/s is blocks,
    // a smaller one upscaled looks better. Hysteresis keeps it from flapping.
    if (this.bps < 150_000) this.scale = 4;
    else if (this.bps < 350_000) this.scale = Math.max(this.scale === 4 && this.bps < 200_000 ? 4 : 2, 2);
    else if (this.bps > 450_000) this.scale = 1;
    return { bitrate: Math.round(this.bps), scale: this.scale };
  }
}
