// The receiving side of a WebTransport media track: objects from streams or
// reassembled datagrams (wtreassembly.ts), NACKs within the playout deadline,
// the jitter buffer, keyframe requests, decode into a MediaStreamTrack.
import type { WtCarrier, WtMode } from './wtcarrier.js';
import { Dgram, type ParsedDatagram, keyframeRequestDatagram, nackDatagram } from './wtdgram.js';
import { JitterBuffer } from './wtjitter.js';
import { MediaSink } from './wtmedia.js';
import { REORDER_MS, Reassembler } from './wtreassembly.js';
import { type StreamReader, streamObjects } from './wtstream.js';
import { WireError } from './wtbytes.js';
import { type ObjectMeta, metaFromPairs } from './wtwire.js';

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

/** How a datagram receiver makes room for retransmissions (see nackScan). */
export type WtRepairHold = 'gaps' | 'floor';
const KEY_REQUEST_REPEAT_MS = 300;

/** A subscribed track: objects in, a MediaStreamTrack out. */
export class WtRemoteTrack {
  readonly track: MediaStreamTrack;
  private sink?: MediaSink;
  private readonly jb: JitterBuffer<{ meta: ObjectMeta; payload: Uint8Array }>;
  private readonly pieces: Reassembler;
  private timer?: ReturnType<typeof setTimeout>;
  private tick?: ReturnType<typeof setInterval>;
  private keyRequestedAt = 0;
  private keyRequestGroup = -1;
  private codec?: string;
  private closed = false;
  private lossSeenAt = -1e9;
  private readonly createdAt = performance.now();
  private readonly start: WtRemoteStats['start'] = { keyRequests: 0 };
  readonly stats = { objectsReceived: 0, bytesReceived: 0, datagramsReceived: 0, nacksSent: 0, keyframeRequests: 0, groupsReset: 0, lastTransitMs: undefined as number | undefined };
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
    this.pieces = new Reassembler({
      object: (g, o, meta, payload) => this.onObject(g, o, meta, payload),
      rtt: (ms) => carrier.noteRtt(ms),
      log: (m) => carrier.log(`${kind} ${m}`),
    });
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
    try {
      for await (const o of streamObjects(r, hasExt, 4 << 20)) {
        if (!o.ext) throw new WireError('object without LOC metadata');
        this.onObject(group, o.id, metaFromPairs(o.ext), o.payload);
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
    if (d.type === Dgram.FEC) this.pieces.fec(d);
    else if (d.type === Dgram.FRAGMENT) this.pieces.fragment(d, now);
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
    for (const n of this.pieces.nacks(now, rtt, budget)) {
      this.carrier.sendDatagram(nackDatagram(this.alias, n.group, n.object, n.missing));
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
      this.jb.setRepairMs(this.pieces.incomplete > 0 ? repair : 0);
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
      if (this.keyRequestGroup === Number.MAX_SAFE_INTEGER) this.keyRequestGroup = Math.max(0, this.pieces.newest.group);
      return;
    }
    this.keyRequestedAt = now;
    this.keyRequestGroup = Math.max(0, this.pieces.newest.group);
    this.stats.keyframeRequests++;
    this.carrier.sendDatagram(keyframeRequestDatagram(this.alias, Math.max(0, this.pieces.newest.group)));
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
      fecRecovered: this.pieces.fecRecovered,
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
