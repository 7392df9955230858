// The publishing side of a WebTransport media track: encoded frames become
// objects on datagrams (kept for NACK answers, with optional FEC on keyframes) or
// on one stream per group (reset when its frames go stale), at the rate the
// controller (wtrate.ts) sets from loss and the queueing delay.
import type { WtCarrier, WtMode } from './wtcarrier.js';
import { type EncodedMediaFrame, VideoSource, AudioSource, codecString, type VideoCodecName } from './wtmedia.js';
import { RateController } from './wtrate.js';
import { type ObjectMeta, RESET_STALE, streamObject, subgroupHeader, objectBytes } from './wtwire.js';
import { type ParsedDatagram, fecDatagrams, fragmentObject } from './wtdgram.js';

export interface WtPublishOptions {
  mode?: WtMode;
  codec?: VideoCodecName;
  /** Start / cap bitrate for video (bit/s). */
  bitrate?: number;
  maxBitrate?: number;
  /** Send an XOR parity datagram per this many fragments of each keyframe (datagram mode; 0: off). */
  fecGroup?: number;
}

export interface WtLocalStats {
  kind: 'audio' | 'video';
  mode: WtMode;
  framesEncoded: number;
  framesSkipped: number;
  bytesSent: number;
  datagramsSent: number;
  retransmitted: number;
  nacksReceived: number;
  keyframeRequests: number;
  groupsReset: number;
  targetBitrate: number;
  scale: number;
  width: number;
  height: number;
}

const HISTORY_MS = 1_000;

/** A camera or microphone published over the session; started when the server subscribes. */
export class WtLocalTrack {
  readonly kind: 'audio' | 'video';
  readonly mode: WtMode;
  /** Set while the server is subscribed (SUBSCRIBE_OK sent). */
  alias = -1;
  private source?: VideoSource | AudioSource;
  private group = -1;
  private object = 0;
  private stream?: { writer: WritableStreamDefaultWriter<Uint8Array>; pending: number; pendingBytes: number; oldest: number; group: number };
  // Datagram history for NACKs: "group/object" → fragments and when they were sent.
  private history = new Map<string, { at: number; frags: Uint8Array[] }>();
  private readonly rate: RateController;
  private rateTimer?: ReturnType<typeof setInterval>;
  private lastStats?: { at: number; dropped: number; sent: number; nacked: number };
  private lastStaleReset = 0;
  private nackedFrags = 0;
  private readonly fecGroup: number;
  private readonly codec: VideoCodecName;
  private scale = 1;
  private closed = false;
  readonly stats = { bytesSent: 0, datagramsSent: 0, retransmitted: 0, nacksReceived: 0, keyframeRequests: 0, groupsReset: 0 };

  constructor(
    readonly track: MediaStreamTrack,
    private readonly carrier: WtCarrier,
    o: WtPublishOptions = {},
  ) {
    this.kind = track.kind === 'audio' ? 'audio' : 'video';
    this.mode = o.mode ?? 'datagram';
    // H.264 by default: Chromium's WebCodecs VP8 encoder took ~80 ms a frame and
    // held frames ~500 ms at 640x480 here, OpenH264 ~4 ms and ~18 ms (docs/webtransport.md).
    this.codec = o.codec ?? 'h264';
    this.fecGroup = o.fecGroup ?? 0;
    // Start low, below WebRTC's estimator's 300 kbit/s, and ramp per clean round trip (wtrate.ts).
    this.rate = new RateController({ startBps: o.bitrate ?? 150_000, maxBps: o.maxBitrate ?? 2_500_000 });
  }

  /** The MoQT track name in the participant's namespace. */
  get name(): string {
    return this.kind;
  }

  /** The server subscribed: start encoding. */
  start(alias: number): void {
    if (this.closed) return;
    this.alias = alias;
    if (this.source) {
      if (this.source instanceof VideoSource) this.source.requestKeyframe();
      return;
    }
    const onFrame = (f: EncodedMediaFrame) => this.send(f);
    const onError = (e: Error) => this.carrier.log(`${this.kind} encoder: ${e.message}`);
    if (this.kind === 'video') {
      this.source = new VideoSource(this.track, onFrame, { codec: this.codec, bitrate: this.rate.bitrate }, onError);
      // The first keyframe at the start rate's resolution: a 640x480 one at 150 kbit/s is a second of a 0.1 Mbit/s link.
      this.source.setRate(this.rate.bitrate, this.rate.scaleNow);
      this.rateTimer = setInterval(() => void this.adapt(), 500);
    } else {
      this.source = new AudioSource(this.track, onFrame, 32_000, onError);
    }
    this.source.start();
  }

  /** The server unsubscribed: stop sending (the encoder keeps its state for a resubscribe). */
  stop(): void {
    this.alias = -1;
    this.endStream(false);
  }

  requestKeyframe(): void {
    this.stats.keyframeRequests++;
    if (this.source instanceof VideoSource) this.source.requestKeyframe();
  }

  private send(f: EncodedMediaFrame): void {
    if (this.alias < 0 || this.closed) return;
    // Video: one group per GOP; audio: one group per frame.
    if (this.kind === 'audio' || f.key || this.group < 0) {
      if (this.kind === 'video' && !f.key) return; // never start a group on a delta frame
      this.group++;
      this.object = 0;
    } else {
      this.object++;
    }
    const v = this.source instanceof VideoSource ? this.source : undefined;
    const meta: ObjectMeta = {
      tsUs: f.tsMs * 1000,
      key: f.key,
      wallMs: Date.now(),
      codec: f.key || this.kind === 'audio' ? (this.kind === 'audio' ? 'opus' : codecString(this.codec)) : undefined,
      width: f.key ? v?.encodedSize.width : undefined,
      height: f.key ? v?.encodedSize.height : undefined,
    };
    if (this.mode === 'datagram') this.sendDatagrams(meta, f.data);
    else this.sendStream(meta, f.data);
  }

  private sendDatagrams(meta: ObjectMeta, payload: Uint8Array): void {
    const obj = objectBytes(meta, payload);
    let frags: Uint8Array[];
    try {
      frags = fragmentObject(this.alias, this.group, this.object, obj, this.carrier.maxDatagramSize);
    } catch (e) {
      this.carrier.log(`${this.kind} frame dropped: ${(e as Error).message}`);
      return;
    }
    for (const d of frags) {
      this.carrier.sendDatagram(d);
      this.stats.datagramsSent++;
      this.stats.bytesSent += d.length;
    }
    // Parity on keyframes: one lost fragment per block is rebuilt without a NACK round trip.
    if (meta.key) {
      for (const d of fecDatagrams(this.alias, this.group, this.object, obj, frags.length, this.fecGroup)) {
        if (d.length <= this.carrier.maxDatagramSize) this.carrier.sendDatagram(d);
      }
    }
    const now = performance.now();
    this.history.set(`${this.group}/${this.object}`, { at: now, frags });
    // Forget what no NACK can still ask for (insertion order is send order).
    for (const [k, h] of this.history) {
      if (now - h.at <= HISTORY_MS) break;
      this.history.delete(k);
    }
  }

  /** Answers a NACK from the server with the fragments it names. */
  onNack(d: Extract<ParsedDatagram, { type: 0x51 }>): void {
    this.stats.nacksReceived++;
    const h = this.history.get(`${d.group}/${d.object}`);
    if (!h) return;
    for (const i of d.indices) {
      const f = h.frags[i];
      if (!f) continue;
      this.carrier.sendDatagram(f);
      this.stats.retransmitted++;
      this.nackedFrags++;
      this.stats.bytesSent += f.length;
    }
  }

  private sendStream(meta: ObjectMeta, payload: Uint8Array): void {
    const now = performance.now();
    if (this.object === 0) {
      this.endStream(true);
      const group = this.group;
      // Newer groups first; audio ahead of any video.
      const sendOrder = (this.kind === 'audio' ? 2 ** 40 : 0) + group;
      let ws: WritableStream<Uint8Array>;
      // The stream is created synchronously as a promise; writes queue behind it.
      const writerP = this.carrier.transport
        .createUnidirectionalStream({ sendOrder } as WebTransportSendStreamOptions)
        .then((s) => {
          ws = s;
          return ws.getWriter();
        });
      const pendingWriter = new DeferredWriter(writerP);
      this.stream = { writer: pendingWriter as unknown as WritableStreamDefaultWriter<Uint8Array>, pending: 0, pendingBytes: 0, oldest: now, group };
      this.write(subgroupHeader(this.alias, group, 0, this.kind === 'audio' ? 0 : 1));
    }
    // Object ids are consecutive in a group: every delta after the first is 0.
    this.write(streamObject(0, meta, payload));
    if (this.kind === 'audio') this.endStream(false);
  }

  private write(b: Uint8Array): void {
    const s = this.stream;
    if (!s) return;
    s.pending++;
    s.pendingBytes += b.length;
    this.stats.bytesSent += b.length;
    s.writer.write(b).then(
      () => {
        s.pending--;
        s.pendingBytes -= b.length;
      },
      () => {},
    );
  }

  /** Finishes the current group's stream, or resets it when its frames are still queued and stale. */
  private endStream(newGroup: boolean): void {
    const s = this.stream;
    if (!s) return;
    this.stream = undefined;
    if (newGroup && s.pending > 0) {
      this.stats.groupsReset++;
      // The stream's reset code comes from the error's streamErrorCode.
      const err = new (WebTransportError as unknown as new (init: { message: string; streamErrorCode: number }) => Error)({ message: 'stale', streamErrorCode: RESET_STALE });
      s.writer.abort(err).catch(() => {});
    } else {
      s.writer.close().catch(() => {});
    }
  }

  /** Bytes written into the current stream and not yet taken by QUIC. */
  private get queuedBytes(): number {
    return this.stream?.pendingBytes ?? 0;
  }

  private async adapt(): Promise<void> {
    if (!(this.source instanceof VideoSource) || this.alias < 0) return;
    const now = performance.now();
    let dropped = 0;
    let est: number | undefined;
    let rtt: number | undefined;
    let minRtt: number | undefined;
    try {
      const st = (await (this.carrier.transport as unknown as { getStats(): Promise<unknown> }).getStats()) as {
        datagrams?: { expiredOutgoing?: number; lostOutgoing?: number; droppedOutgoing?: number };
        estimatedSendRate?: number | null;
        smoothedRtt?: number;
        minRtt?: number;
      };
      dropped = (st.datagrams?.expiredOutgoing ?? 0) + (st.datagrams?.lostOutgoing ?? 0) + (st.datagrams?.droppedOutgoing ?? 0);
      est = st.estimatedSendRate ?? undefined;
      rtt = st.smoothedRtt;
      minRtt = st.minRtt;
    } catch {
      /* stats are optional */
    }
    // Without browser stats, the session's probe measures the queue, in both
    // modes: loss (NACKs) comes only once the bottleneck's buffer is full, which
    // at 0.1 Mbit/s is seconds of media, and the subscriber's handshake waits
    // behind it. The probe's median of five keeps a busy page's late timers (tens
    // of ms) below the 100 ms it takes to read as a queue. Its minimum is the
    // session's, from the handshake on (not one learned on an already queued path).
    // A probe still unanswered counts with its age: behind a queue of seconds the
    // answers come seconds apart, and the queue must show before they do.
    if (rtt === undefined && Number.isFinite(this.carrier.probe.minRttMs)) {
      const p = this.carrier.probe;
      const pending = p.pendingSince > 0 ? now - p.pendingSince : 0;
      if (p.samples >= 2 || pending > p.minRttMs + 100) {
        rtt = Math.max(p.samples ? p.rttMs : 0, pending);
        minRtt = p.minRttMs;
      }
    }
    const prev = this.lastStats;
    this.lastStats = { at: now, dropped, sent: this.stats.datagramsSent, nacked: this.nackedFrags };
    if (!prev) return;
    const sent = Math.max(1, this.stats.datagramsSent - prev.sent);
    const lossFraction = this.mode === 'datagram' ? Math.min(1, (this.nackedFrags - prev.nacked) / sent) : undefined;
    const dropFraction = this.mode === 'datagram' ? Math.min(1, (dropped - prev.dropped) / sent) : undefined;
    // A stream that has queued more than ~300 ms of media is stale: start a new
    // group (keyframe), which resets it, rather than send old frames late.
    const queueMs = rtt !== undefined && minRtt !== undefined ? rtt - minRtt : 0;
    if (this.mode === 'stream' && (this.queuedBytes * 8 > this.rate.bitrate * 0.3 || queueMs > 400) && now - this.lastStaleReset > 2_000) {
      // Seconds of media queued behind a bottleneck: a new group resets the old
      // stream, whose data QUIC then stops sending.
      this.lastStaleReset = now;
      this.source.requestKeyframe();
    }
    const d = this.rate.update({ lossFraction, dropFraction, estimatedBps: est, rttMs: rtt, minRttMs: minRtt, queuedBytes: this.mode === 'stream' ? this.queuedBytes : undefined }, now);
    this.scale = d.scale;
    this.source.setRate(d.bitrate, d.scale);
  }

  getStats(): WtLocalStats {
    const v = this.source instanceof VideoSource ? this.source : undefined;
    return {
      kind: this.kind,
      mode: this.mode,
      framesEncoded: this.source?.counters.encoded ?? 0,
      framesSkipped: v?.counters.skipped ?? 0,
      ...this.stats,
      targetBitrate: this.kind === 'video' ? this.rate.bitrate : 32_000,
      scale: this.scale,
      width: v?.encodedSize.width ?? 0,
      height: v?.encodedSize.height ?? 0,
    };
  }

  close(): void {
    this.closed = true;
    clearInterval(this.rateTimer);
    this.endStream(false);
    this.source?.close();
  }
}

// Writes queued until the stream exists; a write returns when QUIC took the bytes.
class DeferredWriter {
  private w?: WritableStreamDefaultWriter<Uint8Array>;
  private failed = false;
  private readonly ready: Promise<WritableStreamDefaultWriter<Uint8Array> | undefined>;
  constructor(p: Promise<WritableStreamDefaultWriter<Uint8Array>>) {
    this.ready = p.then(
      (w) => (this.w = w),
      () => {
        this.failed = true;
        return undefined;
      },
    );
  }
  async write(b: Uint8Array): Promise<void> {
    const w = this.w ?? (await this.ready);
    if (!w || this.failed) throw new Error('stream not open');
    return w.write(b);
  }
  async close(): Promise<void> {
    const w = this.w ?? (await this.ready);
    await w?.close();
  }
  async abort(reason: unknown): Promise<void> {
    const w = this.w ?? (await this.ready);
    await w?.abort(reason);
  }
}
