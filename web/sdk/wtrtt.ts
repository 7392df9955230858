// A WebTransport session's round-trip estimates: the smoothed RTT tracks use
// for NACK timing, and the probed RTT with the path's minimum that the rate
// controller reads a queue from. Pure arithmetic over samples the session takes.

export class RttEstimator {
  /** Smoothed RTT, ms: the browser's where it reports one, else NACK round trips; 100 until known. */
  rttMs = 100;
  private fromStats = false;
  private nackSamples = 0;
  /**
   * Probed round trip including queues (median of the last five), the session's
   * minimum from the handshake on (Infinity before it), and when the probe in
   * flight was sent (0: none).
   */
  readonly probe = { rttMs: 0, minRttMs: Infinity, samples: 0, pendingSince: 0 };
  /**
   * The lowest round trip of the session, from its start: half the handshake and
   * every request's answer, the first ones before any media queued. A minimum
   * learned only once media flows would be taken on a queued path and hide the queue.
   */
  private pathMin = Infinity;
  private window: number[] = [];

  /** A round trip from the browser's transport stats; from then on NACK samples are ignored. */
  fromBrowser(ms: number | undefined): void {
    if (!ms || !(ms > 0)) return;
    this.rttMs = ms;
    this.fromStats = true;
  }

  /** A NACK answered after `ms` (the estimate where the browser has no WebTransport.getStats()). */
  nackAnswered(ms: number): void {
    if (this.fromStats || !(ms > 0)) return;
    this.nackSamples++;
    this.rttMs = this.nackSamples === 1 ? ms : this.rttMs + (ms - this.rttMs) / 8;
  }

  /** A request (or the handshake) answered after `ms`: a bound on the path's minimum. */
  requestAnswered(ms: number): void {
    this.pathMin = Math.min(this.pathMin, ms);
  }

  probeSent(now: number): void {
    this.probe.pendingSince = now;
    this.probe.minRttMs = Math.min(this.probe.minRttMs, this.pathMin);
  }

  probeAnswered(ms: number): void {
    const p = this.probe;
    p.samples++;
    // The median of the last five: a busy page (timers late by tens of ms on a
    // loaded machine) must not read as a queue in the network.
    this.window.push(ms);
    if (this.window.length > 5) this.window.shift();
    p.rttMs = [...this.window].sort((a, b) => a - b)[Math.floor(this.window.length / 2)];
    p.minRttMs = Math.min(this.pathMin, ms);
    this.pathMin = p.minRttMs;
  }

  /** The probe in flight was answered or abandoned. */
  probeEnded(): void {
    this.probe.pendingSince = 0;
  }
}
