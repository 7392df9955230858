// What a WebTransport media track (wtlocal.ts, wtremote.ts) needs from the
// session that carries it (wt.ts owns the WebTransport and routes by track alias).

export type WtMode = 'datagram' | 'stream';

/** What a track needs from the session that carries it. */
export interface WtCarrier {
  readonly transport: WebTransport;
  sendDatagram(b: Uint8Array): void;
  readonly maxDatagramSize: number;
  /** Smoothed RTT, ms (from getStats or NACK round trips; 100 until known). */
  readonly rttMs: number;
  /** A round-trip sample (a NACK answered), ms. */
  noteRtt(ms: number): void;
  /**
   * Probed round trip including queues (median of the last five), the session's
   * minimum from the handshake on (Infinity before it), and when the probe in
   * flight was sent (0: none).
   */
  readonly probe: { rttMs: number; minRttMs: number; samples: number; pendingSince: number };
  log(msg: string): void;
}
