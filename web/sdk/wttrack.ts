// One direction of one WebTransport media track: the publishing side
// (WtLocalTrack: encoded frames → objects on datagrams or streams, NACK answers,
// stale-group resets, rate control) and the receiving side (WtRemoteTrack:
// fragment reassembly, NACKs within the playout deadline, optional FEC, jitter
// buffer, keyframe requests, decode into a MediaStreamTrack). The session
// (wt.ts) owns the WebTransport and routes datagrams and streams by track alias.
import { JitterBuffer } from './wtjitter.js';
import { type EncodedMediaFrame, MediaSink, VideoSource, AudioSource, codecString, type VideoCodecName } from './wtmedia.js';
import { RateController } from './wtrate.js';
import {
  type ObjectMeta,
  type ParsedDatagram,
  RESET_STALE,
  StreamReader,
  WireError,
  fecDatagram,
  fragmentObject,
  metaFromPairs,
  keyframeRequestDatagram,
  nackDatagram,
  objectBytes,
  parseObjectBytes,
  streamObject,
  subgroupHeader,
} from './wtwire.js';

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

// ---- publishing ------------------------------------------------------------------

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
  private sentSinceFrags = 0;
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
    this.sentSinceFrags += frags.length;
    if (meta.key && this.fecGroup > 1 && frags.length > 1) {
      // Parity over the fragments' data parts: one lost fragment per block is rebuilt.
      const obj = objectBytes(meta, payload);
      const per = Math.ceil(obj.length / frags.length);
      for (let first = 0; first < frags.length; first += this.fecGroup) {
        const parts: Uint8Array[] = [];
        for (let i = first; i < Math.min(frags.length, first + this.fecGroup); i++) parts.push(obj.subarray(i * per, Math.min(obj.length, (i + 1) * per)));
        if (parts.length < 2) continue;
        const d = fecDatagram(this.alias, this.group, this.object, first, parts);
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

// ---- receiving -----------------------------------------------------------------

export interface WtRemoteStats {
  kind: 'audio' | 'video';
  mode: WtMode;
  objectsReceived: number;
  bytesReceived: number;
  datagramsReceived: number;
  framesDecoded: number;
  framesRendered: number;
  decodeErrors: number;
  framesLost: number;
  framesLate: number;
  framesDropped: number;
  nacksSent: number;
  fecRecovered: number;
  keyframeRequests: number;
  groupsReset: number;
  jitterMs: number;
  targetDelayMs: number;
  /** Capture wall clock to decode, last frame (same-clock setups only), ms. */
  lastTransitMs?: number;
  /**
   * The start, in ms after the subscription was made (SUBSCRIBE_OK): first
   * datagram or stream object, first complete object, first keyframe, first
   * frame decoded; and the keyframe requests sent before the first keyframe.
   */
  start: { datagram?: number; object?: number; keyframe?: number; decoded?: number; keyRequests: number };
}

interface Partial {
  count: number;
  len: number;
  parts: (Uint8Array | undefined)[];
  got: number;
  first: number; // when the first fragment came (or the gap was noticed)
  last: number; // when the latest fragment of it came
  nackAt: number;
  nacks: number;
  known: boolean; // count/len known (a fragment arrived), not only inferred from a gap
  fec: { first: number; count: number; xor: Uint8Array }[];
}

const REORDER_MS = 10;

/** How a datagram receiver makes room for retransmissions (see nackScan). */
export type WtRepairHold = 'gaps' | 'floor';
const KEY_REQUEST_REPEAT_MS = 300;

/** A subscribed track: objects in, a MediaStreamTrack out. */
export class WtRemoteTrack {
  readonly track: MediaStreamTrack;
  private sink?: MediaSink;
  private readonly jb: JitterBuffer<{ meta: ObjectMeta; payload: Uint8Array }>;
  private partial = new Map<string, Partial>();
  private newest = { group: -1, object: -1 };
  private timer?: ReturnType<typeof setTimeout>;
  private tick?: ReturnType<typeof setInterval>;
  private keyRequestedAt = 0;
  private keyRequestGroup = -1;
  private codec?: string;
  private closed = false;
  private lossSeenAt = -1e9;
  private readonly createdAt = performance.now();
  private readonly start: WtRemoteStats['start'] = { keyRequests: 0 };
  readonly stats = { objectsReceived: 0, bytesReceived: 0, datagramsReceived: 0, nacksSent: 0, fecRecovered: 0, keyframeRequests: 0, groupsReset: 0, lastTransitMs: undefined as number | undefined };
  /** Called for each decoded video frame before it is rendered (measurement hooks). */
  onVideoFrame?: (f: VideoFrame) => void;

  constructor(
    readonly kind: 'audio' | 'video',
    readonly mode: WtMode,
    readonly alias: number,
    private readonly carrier: WtCarrier,
    private readonly repairHold: WtRepairHold = 'gaps',
  ) {
    this.jb = new JitterBuffer({ video: kind === 'video', minDelayMs: 15, maxDelayMs: 500 });
    // The track exists at once (the app can attach it); frames flow after the first keyframe.
    this.sink = new MediaSink(kind, kind === 'video' ? 'vp8' : 'opus', () => this.requestKeyframe(true));
    this.track = this.sink.track;
    this.sink.onVideoFrame = (f) => {
      this.start.decoded ??= performance.now() - this.createdAt;
      this.onVideoFrame?.(f);
    };
    this.tick = setInterval(() => this.onTick(performance.now()), REORDER_MS);
  }

  // ---- input

  /** One object from a stream or a reassembled datagram object. */
  onObject(group: number, object: number, meta: ObjectMeta, payload: Uint8Array): void {
    if (this.closed) return;
    const now = performance.now();
    this.stats.objectsReceived++;
    this.lastObjectAt = now;
    this.stats.bytesReceived += payload.length;
    if (meta.codec && meta.codec !== this.codec) this.setCodec(meta.codec);
    if (meta.wallMs) this.stats.lastTransitMs = Date.now() - meta.wallMs;
    this.start.object ??= now - this.createdAt;
    if (object === 0 && meta.key && this.start.keyframe === undefined) {
      this.start.keyframe = now - this.createdAt;
      this.keyRequestGroup = Number.MAX_SAFE_INTEGER; // the first keyframe satisfies any request
    }
    if (group > this.keyRequestGroup && object === 0 && meta.key) this.keyRequestGroup = Number.MAX_SAFE_INTEGER; // satisfied
    this.jb.push({ group, object, tsMs: meta.tsUs / 1000, key: meta.key || this.kind === 'audio', data: { meta, payload } }, now);
    this.drain(now);
  }

  private setCodec(codec: string): void {
    // A new codec (e.g. the publisher switched) needs a new decoder; the track stays.
    const first = this.codec === undefined;
    this.codec = codec;
    if (first && (codec === 'vp8' || codec === 'opus')) return;
    this.sink?.reconfigure(codec.startsWith('avc1') ? 'h264' : codec);
  }

  /** A subgroup stream of this track: its objects until FIN or reset. */
  async readStream(r: StreamReader, group: number, hasExt: boolean): Promise<void> {
    let id = -1;
    try {
      while (!(await r.atEnd())) {
        const delta = await r.vi();
        id = id < 0 ? delta : id + delta + 1;
        let meta: ObjectMeta | undefined;
        if (hasExt) {
          const len = await r.vi();
          if (len > 4096) throw new WireError(`extension headers of ${len} bytes`);
          meta = metaFromPairs(await r.exact(len));
        }
        const plen = await r.vi();
        if (plen === 0) {
          await r.vi(); // status
          continue;
        }
        if (plen > 4 << 20) throw new WireError(`object of ${plen} bytes`);
        const payload = await r.exact(plen);
        if (!meta) throw new WireError('object without LOC metadata');
        this.onObject(group, id, meta, payload);
      }
    } catch (e) {
      // A reset stream is a stale group the publisher gave up: its frames are not coming.
      this.stats.groupsReset++;
      if (!(e instanceof WireError)) return;
      this.carrier.log(`${this.kind} stream: ${e.message}`);
    }
  }

  /** A FRAGMENT or FEC datagram for this track. */
  onDatagram(d: ParsedDatagram): void {
    if (this.closed) return;
    const now = performance.now();
    this.stats.datagramsReceived++;
    this.start.datagram ??= now - this.createdAt;
    if (d.type === 0x53) {
      const p = this.partial.get(`${d.group}/${d.object}`);
      if (p) {
        p.fec.push({ first: d.first, count: d.count, xor: d.xor });
        this.tryFec(d.group, d.object, p, now);
      }
      return;
    }
    if (d.type !== 0x50) return;
    // Older than what the jitter buffer already passed: useless.
    const k = `${d.group}/${d.object}`;
    let p = this.partial.get(k);
    if (!p) {
      if (this.done.has(k)) return; // a duplicate of a completed object
      this.noteGap(d.group, d.object, now);
      p = { count: d.count, len: d.objectLength, parts: new Array(d.count), got: 0, first: now, last: now, nackAt: 0, nacks: 0, known: true, fec: [] };
      this.partial.set(k, p);
    } else if (!p.known) {
      p.count = d.count;
      p.len = d.objectLength;
      p.parts = new Array(d.count);
      p.known = true;
    }
    if (d.count !== p.count || d.objectLength !== p.len || p.parts[d.index]) return;
    p.parts[d.index] = d.data;
    p.got++;
    p.last = now;
    // The answer to our only NACK for it: a clean round-trip sample.
    if (p.nacks === 1 && now - p.nackAt < 2_000) {
      this.carrier.noteRtt(now - p.nackAt);
      p.nacks = 2;
    }
    if (p.got === p.count) this.complete(d.group, d.object, p);
    else this.tryFec(d.group, d.object, p, now);
  }

  // Recently completed objects, so that a retransmitted duplicate is not a new one.
  private done = new Set<string>();

  private complete(group: number, object: number, p: Partial): void {
    const k = `${group}/${object}`;
    this.partial.delete(k);
    this.done.add(k);
    if (this.done.size > 512) this.done.delete(this.done.values().next().value as string);
    const obj = new Uint8Array(p.len);
    let off = 0;
    for (const part of p.parts) {
      obj.set(part!, off);
      off += part!.length;
    }
    if (off !== p.len) {
      this.carrier.log(`${this.kind} object ${k}: fragments sum to ${off}, header says ${p.len}`);
      return;
    }
    let parsed;
    try {
      parsed = parseObjectBytes(obj);
    } catch (e) {
      this.carrier.log(`${this.kind} object ${k}: ${(e as Error).message}`);
      return;
    }
    this.onObject(group, object, parsed.meta, parsed.payload);
  }

  private tryFec(group: number, object: number, p: Partial, now: number): void {
    if (!p.known) return;
    const per = Math.ceil(p.len / p.count);
    for (const f of p.fec) {
      const missing: number[] = [];
      for (let i = f.first; i < Math.min(p.count, f.first + f.count); i++) if (!p.parts[i]) missing.push(i);
      if (missing.length !== 1) continue;
      const m = missing[0];
      const x = f.xor.slice();
      for (let i = f.first; i < Math.min(p.count, f.first + f.count); i++) {
        const part = p.parts[i];
        if (part) for (let j = 0; j < part.length; j++) x[j] ^= part[j];
      }
      const size = Math.min(per, p.len - m * per);
      if (size <= 0) continue;
      p.parts[m] = x.subarray(0, size);
      p.got++;
      this.stats.fecRecovered++;
      if (p.got === p.count) {
        this.complete(group, object, p);
        return;
      }
    }
    void now;
  }

  // Objects skipped between the newest seen and this one get placeholders so
  // that the NACK scan asks for them (fragment 0; the answer tells their size).
  private noteGap(group: number, object: number, now: number): void {
    const n = this.newest;
    if (group === n.group && object > n.object + 1) {
      for (let o = n.object + 1; o < object && o < n.object + 64; o++) {
        const k = `${group}/${o}`;
        if (!this.partial.has(k) && !this.done.has(k)) {
          this.partial.set(k, { count: 1, len: 0, parts: [undefined], got: 0, first: now, last: now, nackAt: 0, nacks: 0, known: false, fec: [] });
        }
      }
    }
    if (group > n.group || (group === n.group && object > n.object)) this.newest = { group, object };
  }

  private lastObjectAt = 0;
  private lastDecoded = 0;
  private lastProgressAt = 0;

  private onTick(now: number): void {
    // The first keyframe: the server asked the publisher for one when we
    // subscribed, in a datagram that may be lost (or folded into a request for
    // a keyframe that already went by, by the server's rate limit). Until one
    // arrives, ask again (the server forwards it) after two round trips,
    // backing off: on a link too slow for a keyframe in that time, every
    // request would start another keyframe behind the last.
    const wait = Math.min(5_000, Math.max(KEY_REQUEST_REPEAT_MS, 2 * this.carrier.rttMs + 100) * 2 ** this.start.keyRequests);
    if (this.kind === 'video' && this.start.keyframe === undefined && now - Math.max(this.createdAt, this.keyRequestedAt) > wait) {
      this.start.keyRequests++;
      this.requestKeyframe(false);
      this.keyRequestGroup = -1; // repeated here, with the back-off, not every 300 ms below
    }
    if (this.mode === 'datagram') this.nackScan(now);
    else if (this.keyRequestGroup !== Number.MAX_SAFE_INTEGER && this.keyRequestGroup >= 0 && now - this.keyRequestedAt > KEY_REQUEST_REPEAT_MS) this.requestKeyframe(false);
    // Watchdog: objects keep coming but nothing decodes (a decoder that failed,
    // a lost keyframe nobody noticed): ask for a fresh keyframe.
    const decoded = this.sink?.counters.decoded ?? 0;
    if (decoded !== this.lastDecoded) {
      this.lastDecoded = decoded;
      this.lastProgressAt = now;
    } else if (this.kind === 'video' && now - this.lastObjectAt < 500 && now - this.lastProgressAt > 1_000) {
      this.lastProgressAt = now;
      this.sink?.resync();
      this.requestKeyframe(false);
    }
  }

  /** Sends NACKs for incomplete objects still worth waiting for; gives up the rest. */
  private nackScan(now: number): void {
    const rtt = this.carrier.rttMs;
    // Wait for a retransmission only while it can arrive before the frame would
    // be given up by the jitter buffer (its deadline plus one RTT budget).
    const budget = this.jb.targetMs + Math.max(rtt * 2, 100);
    for (const [k, p] of this.partial) {
      const age = now - p.first;
      if (age > budget + 200) {
        this.partial.delete(k);
        continue;
      }
      // Evidence of loss, not just fragments still on their way: a later object
      // has started arriving, or this one has stalled for a few reorder windows.
      const [g0, o0] = k.split('/').map(Number);
      const newerSeen = this.newest.group > g0 || (this.newest.group === g0 && this.newest.object > o0);
      const stalled = now - p.last > 3 * REORDER_MS;
      if (!(newerSeen || stalled) || now - p.last < REORDER_MS || now - p.nackAt < Math.max(rtt, 20) || age > budget) continue;
      const missing: number[] = [];
      for (let i = 0; i < p.count && missing.length < 256; i++) if (!p.parts[i]) missing.push(i);
      if (!missing.length) continue;
      const [g, o] = k.split('/').map(Number);
      this.carrier.sendDatagram(nackDatagram(this.alias, g, o, missing));
      p.nackAt = now;
      p.nacks++;
      this.stats.nacksSent++;
      this.lossSeenAt = now;
    }
    // Room for a retransmission: 'gaps' holds only the frames behind a missing
    // one, and only while an object is incomplete (its repair can still come);
    // 'floor' (the earlier behaviour, kept for A/B runs in bench/wt) raised the
    // playout floor of every frame for 5 s after a NACK.
    const repair = Math.min(300, rtt * 1.5 + 20);
    if (this.repairHold === 'floor') this.jb.setMinDelay(now - this.lossSeenAt < 5_000 ? repair : 15);
    else {
      const was = this.jb.repair;
      this.jb.setRepairMs(this.partial.size > 0 ? repair : 0);
      if (this.jb.repair < was) this.drain(now); // a hold that just ended releases its frames now
    }
    if (this.jb.needKeyframe) this.requestKeyframe(false);
    // Repeated until a new group arrives (docs/protocol.md).
    else if (this.keyRequestGroup !== Number.MAX_SAFE_INTEGER && this.keyRequestGroup >= 0 && now - this.keyRequestedAt > KEY_REQUEST_REPEAT_MS) this.requestKeyframe(false);
  }

  private requestKeyframe(fromDecoder: boolean): void {
    const now = performance.now();
    this.jb.needKeyframe = false;
    if (fromDecoder) this.sink?.resync();
    if (this.kind !== 'video' || now - this.keyRequestedAt < KEY_REQUEST_REPEAT_MS) {
      if (this.keyRequestGroup === Number.MAX_SAFE_INTEGER) this.keyRequestGroup = Math.max(0, this.newest.group);
      return;
    }
    this.keyRequestedAt = now;
    this.keyRequestGroup = Math.max(0, this.newest.group);
    this.stats.keyframeRequests++;
    this.carrier.sendDatagram(keyframeRequestDatagram(this.alias, Math.max(0, this.newest.group)));
  }

  // ---- output

  private drain(now: number): void {
    const out = this.jb.pop(now);
    for (const f of out) this.sink?.decode({ key: f.key, tsMs: f.tsMs, data: f.data.payload });
    if (this.jb.needKeyframe) {
      this.sink?.resync();
      this.requestKeyframe(false);
    }
    clearTimeout(this.timer);
    const due = this.jb.nextDue();
    if (due !== undefined) this.timer = setTimeout(() => this.drain(performance.now()), Math.max(1, due - now));
  }

  getStats(): WtRemoteStats {
    const j = this.jb.stats;
    return {
      kind: this.kind,
      mode: this.mode,
      ...this.stats,
      framesDecoded: this.sink?.counters.decoded ?? 0,
      framesRendered: this.sink?.counters.rendered ?? 0,
      decodeErrors: this.sink?.counters.errors ?? 0,
      framesLost: j.lost,
      framesLate: j.late,
      framesDropped: j.dropped,
      jitterMs: j.jitterMs,
      targetDelayMs: this.jb.targetMs,
      start: { ...this.start },
    };
  }

  close(): void {
    this.closed = true;
    clearTimeout(this.timer);
    clearInterval(this.tick);
    this.sink?.close();
  }
}
