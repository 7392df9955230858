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
  /** Start-up: multiplicative growth per clean round trip until the first sign of congestion. */
  private ramping = true;

  constructor(o: RateOptions = {}) {
    this.min = o.minBps ?? 50_000;
    this.max = o.maxBps ?? 2_500_000;
    // Start below what WebRTC's estimator starts at (300 kbit/s): a start above
    // the bottleneck fills its queue with seconds of media before any signal
    // arrives (0.1 Mbit/s in docs/benchmarks.md), and the start-up ramp below
    // reaches a fast link's rate within seconds.
    this.bps = Math.min(this.max, o.startBps ?? 150_000);
    this.scale = this.bps < 150_000 ? 4 : this.bps < 350_000 ? 2 : 1;
  }

  /** The resolution scale for the current rate (the encoder's first configuration). */
  get scaleNow(): number {
    return this.scale;
  }

  /** True until the first decrease: growth is multiplicative per clean round trip. */
  get startingUp(): boolean {
    return this.ramping;
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
    const hasDelay = s.rttMs !== undefined && s.minRttMs !== undefined;
    const queueMs = hasDelay ? s.rttMs! - s.minRttMs! : 0;
    const queueing = hasDelay && queueMs > Math.max(100, s.minRttMs!);
    const delayClean = hasDelay && queueMs <= Math.max(50, 0.5 * s.minRttMs!);
    if (loss > 0.1 || queued > this.bps * 0.3 || queueing) {
      // At most one decrease per RTT (plus a little), so one loss burst is one step.
      if (now - this.lastDecrease > rtt + 100) {
        // Half a second of queue means the rate is well above the link (a
        // start-up overshoot): halve, as 0.8 steps would take seconds to drain it.
        const f = loss > 0.1 ? 1 - 0.5 * loss : queueMs > 500 ? 0.5 : 0.8;
        this.bps *= Math.max(0.5, f);
        this.lastDecrease = now;
        this.ramping = false;
      }
    } else if (this.ramping && hasDelay) {
      // Start-up, as GCC's and QUIC's slow start: grow by a fifth per clean
      // round trip (at most a third per update, so the delay signal, which lags
      // by a probe or two, catches an overshoot early), only while the delay
      // signal says the path holds no queue and nothing is lost. Without a delay
      // signal the slow growth below applies: loss comes only once a queue is full.
      if (loss < 0.02 && delayClean && dt > 0) {
        this.bps *= Math.min(1.35, Math.pow(1.2, dt / Math.max(100, rtt)));
        // QUIC's own estimate, where the browser reports it, is a rate the path carried.
        if (s.estimatedBps && s.estimatedBps > 0) this.bps = Math.max(this.bps, 0.5 * s.estimatedBps);
      }
    } else if (loss < 0.02 && !(hasDelay && !delayClean)) {
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
