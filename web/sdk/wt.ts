// WtSession: a participant in a Petrel room over WebTransport instead of
// WebRTC (docs/protocol.md "WebTransport media (MoQT)", docs/webtransport.md).
// One WebTransport session carries the MoQT control stream, a request stream
// per subscription, the room's events track, and the media: WebCodecs frames as
// objects on datagrams (with NACK) or on one stream per group.
//
//   const s = await WtSession.connect(location.origin, token, { mode: 'datagram' });
//   s.on('trackSubscribed', (t) => video.srcObject = new MediaStream([t.track]));
//   await s.publish({ video: camTrack, audio: micTrack });
import { Emitter } from './emitter.js';
import type { ParticipantInfo, TrackInfo } from './protocol.js';
import { PetrelError } from './protocol.js';
import type { WtCarrier, WtMode } from './wtcarrier.js';
import { type Pairs, WireError } from './wtbytes.js';
import { Dgram, type ParsedDatagram, parseDatagram } from './wtdgram.js';
import { WtLocalTrack, type WtLocalStats, type WtPublishOptions } from './wtlocal.js';
import { WtRemoteTrack, type WtRemoteStats, type WtRepairHold } from './wtremote.js';
import { StreamReader, streamObjects } from './wtstream.js';
import {
  MOQT_VERSION,
  Msg,
  PARAM_DATAGRAM,
  RequestErrorCode,
  Setup,
  describeReply,
  parseMessage,
  publishNamespaceMessage,
  requestErrorMessage,
  setupMessage,
  subgroupLayout,
  subscribeMessage,
  subscribeOkMessage,
  streamObject,
  subgroupHeader,
  unsubscribeMessage,
} from './wtwire.js';

export type { WtMode } from './wtcarrier.js';

export interface WtConnectOptions {
  /** The WebTransport URL (default: the origin's host and port, path /v1/moq). */
  url?: string;
  /** Delivery asked for on subscriptions (default 'datagram'). */
  mode?: WtMode;
  /** Subscribe to every track in the room (default true). */
  autoSubscribe?: boolean;
  /** Skip fetching the development certificate hash (production certificate). */
  noCertHash?: boolean;
  /**
   * How a datagram subscriber waits for retransmissions: 'gaps' (default) holds
   * only frames behind a missing one; 'floor' is the earlier whole-stream
   * delay, kept for A/B runs of the lab comparison (bench/wt).
   */
  repairHold?: WtRepairHold;
}

/** A track another participant publishes, as the events track announced it. */
export interface WtTrackInfo extends TrackInfo {
  moqTrack?: string;
}

export interface WtParticipant {
  sid: string;
  identity: string;
  name: string;
  tracks: Map<string, WtTrackInfo>;
}

export interface WtSubscription {
  participant: WtParticipant;
  info: WtTrackInfo;
  remote: WtRemoteTrack;
  readonly track: MediaStreamTrack;
}

export interface WtDataMessage {
  from?: string;
  fromSid?: string;
  topic?: string;
  text?: string;
  payload: Uint8Array;
}

export interface WtEvents {
  participantJoined: (p: WtParticipant) => void;
  participantLeft: (p: WtParticipant) => void;
  trackPublished: (info: WtTrackInfo, p: WtParticipant) => void;
  trackUnpublished: (info: WtTrackInfo, p: WtParticipant) => void;
  trackSubscribed: (s: WtSubscription) => void;
  trackUnsubscribed: (s: WtSubscription) => void;
  dataReceived: (m: WtDataMessage) => void;
  /** Any events-track message, raw (dominantSpeaker, …). */
  event: (msg: Record<string, unknown>) => void;
  disconnected: (reason: string) => void;
}

export interface WtStats {
  rttMs: number;
  /** Milliseconds from connect() to the `joined` event. */
  connectMs: number;
  local: WtLocalStats[];
  remote: (WtRemoteStats & { participant: string; trackSid: string })[];
  transport?: unknown;
}

interface Request {
  id: number;
  writer: WritableStreamDefaultWriter<Uint8Array>;
  reader: StreamReader;
}

const enc = new TextEncoder();
const dec = new TextDecoder();
/** Control and request streams: ahead of every media stream's send order. */
const CONTROL_SEND_ORDER = 2 ** 50;

/** Room name and identity from a token's claims (not verified here: the server does). */
function tokenClaims(token: string): { room: string; identity: string } {
  try {
    const b64 = token.split('.')[1].replace(/-/g, '+').replace(/_/g, '/');
    const c = JSON.parse(atob(b64 + '='.repeat((4 - (b64.length % 4)) % 4)));
    return { room: String(c.room ?? ''), identity: String(c.sub ?? '') };
  } catch {
    throw new PetrelError('bad_token', 'the token is not a JWT');
  }
}

/** The WebTransport URL and development certificate hash for a Petrel origin. */
export async function wtEndpoint(origin: string, o: WtConnectOptions = {}): Promise<{ url: string; hashes?: WebTransportHash[] }> {
  const u = new URL(origin);
  // Chromium resolves localhost to ::1 first, where the QUIC listener may not be.
  const host = u.hostname === 'localhost' ? '127.0.0.1' : u.hostname;
  const url = o.url ?? `https://${host}:${u.port || (u.protocol === 'https:' ? '443' : '80')}/v1/moq`;
  if (o.noCertHash) return { url };
  const res = await fetch(new URL('/v1/wt-cert-hash', origin));
  if (res.status === 404) return { url }; // a configured certificate: no hash to pin
  if (!res.ok) throw new PetrelError('webtransport', `certificate hash: HTTP ${res.status}`);
  const j = (await res.json()) as { algorithm: string; value: string };
  const raw = Uint8Array.from(atob(j.value), (c) => c.charCodeAt(0));
  return { url, hashes: [{ algorithm: j.algorithm || 'sha-256', value: raw }] };
}

export class WtSession extends Emitter<WtEvents> implements WtCarrier {
  readonly transport: WebTransport;
  readonly room: string;
  readonly identity: string;
  participantSid = '';
  readonly participants = new Map<string, WtParticipant>(); // by sid
  readonly subscriptions = new Map<number, WtSubscription>(); // by request id
  private readonly byAlias = new Map<number, WtRemoteTrack>();
  private readonly local = new Map<string, WtLocalTrack>(); // by track name
  private readonly localByAlias = new Map<number, WtLocalTrack>();
  private readonly serverRequests = new Map<number, { name: string; writer: WritableStreamDefaultWriter<Uint8Array> }>();
  private nextRequest = 0;
  private nextAlias = 1;
  private dgramWriter: WritableStreamDefaultWriter<Uint8Array>;
  private control?: WritableStreamDefaultWriter<Uint8Array>;
  private eventsAlias = -1;
  private rtt = 100;
  private statsTimer?: ReturnType<typeof setInterval>;
  private probeTimer?: ReturnType<typeof setInterval>;
  private closed = false;
  private readonly started = performance.now();
  connectMs = 0;
  private joined!: (v: void) => void;
  private joinFailed!: (e: Error) => void;
  private readonly joinedP: Promise<void>;
  private dataAlias = -1;
  private dataGroup = 0;
  private announce?: Request;
  readonly mode: WtMode;
  private readonly repairHold: WtRepairHold;
  private readonly autoSubscribe: boolean;
  /** Diagnostics (malformed input, encoder errors); replace to route elsewhere. */
  log: (msg: string) => void = (m) => console.warn(`petrel wt: ${m}`);

  private constructor(transport: WebTransport, claims: { room: string; identity: string }, o: WtConnectOptions) {
    super();
    this.transport = transport;
    this.room = claims.room;
    this.identity = claims.identity;
    this.mode = o.mode ?? 'datagram';
    this.repairHold = o.repairHold ?? 'gaps';
    this.autoSubscribe = o.autoSubscribe ?? true;
    this.dgramWriter = transport.datagrams.writable.getWriter();
    this.joinedP = new Promise((res, rej) => {
      this.joined = res;
      this.joinFailed = rej;
    });
  }

  /** Opens the session, joins the room, and resolves once the room state arrived. */
  static async connect(origin: string, token: string, o: WtConnectOptions = {}): Promise<WtSession> {
    const claims = tokenClaims(token);
    const { url, hashes } = await wtEndpoint(origin, o);
    const init: WebTransportOptions & { protocols?: string[] } = { protocols: [MOQT_VERSION] };
    if (hashes) init.serverCertificateHashes = hashes;
    const t = new WebTransport(`${url}?token=${encodeURIComponent(token)}`, init);
    const s = new WtSession(t, claims, o);
    try {
      await t.ready;
    } catch (e) {
      throw new PetrelError('webtransport', `session refused: ${(e as Error).message ?? e}`);
    }
    s.pathMinRtt = (performance.now() - s.started) / 2;
    void t.closed.then(
      (i) => s.shutdown(`closed: ${i.reason || i.closeCode}`),
      (e) => s.shutdown(`closed: ${(e as Error).message ?? e}`),
    );
    // Datagrams older than a playout deadline are worth nothing: let the browser drop them.
    try {
      (t.datagrams as unknown as { outgoingMaxAge: number }).outgoingMaxAge = 500;
    } catch {
      /* not settable here */
    }
    await s.start();
    const timeout = setTimeout(() => s.joinFailed(new PetrelError('join_timeout', 'no room state within 10 s')), 10_000);
    try {
      await s.joinedP;
    } catch (e) {
      s.close();
      throw e;
    } finally {
      clearTimeout(timeout);
    }
    s.connectMs = performance.now() - s.started;
    return s;
  }

  get rttMs(): number {
    return this.rtt;
  }

  private rttFromStats = false;

  noteRtt(ms: number): void {
    // Chromium 156 has no WebTransport.getStats(): NACK round trips are the estimate then.
    if (this.rttFromStats || !(ms > 0)) return;
    this.rttSamples++;
    this.rtt = this.rttSamples === 1 ? ms : this.rtt + (ms - this.rtt) / 8;
  }
  private rttSamples = 0;

  get maxDatagramSize(): number {
    return (this.transport.datagrams as unknown as { maxDatagramSize?: number }).maxDatagramSize ?? 1200;
  }

  sendDatagram(b: Uint8Array): void {
    if (this.closed) return;
    // Unreliable by nature: a full queue or a closed session drops it, like the network would.
    this.dgramWriter.write(b).catch(() => {});
  }

  private async start(): Promise<void> {
    const ctl = await this.transport.createUnidirectionalStream({ sendOrder: CONTROL_SEND_ORDER } as WebTransportSendStreamOptions);
    this.control = ctl.getWriter();
    const setup: Pairs = new Map();
    setup.set(Setup.IMPLEMENTATION, enc.encode('petrel-web'));
    setup.set(Setup.PETREL, enc.encode(JSON.stringify({ ext: ['dgram'] })));
    await this.control.write(setupMessage(setup));
    void this.acceptUni();
    void this.acceptBidi();
    void this.readDatagrams();
    this.statsTimer = setInterval(() => void this.pollRtt(), 1000);
    this.probeTimer = setInterval(() => {
      if (this.local.size) void this.probeRtt();
    }, 250);
    // The room's events, first: the `joined` object tells who is here.
    void this.subscribeEvents();
  }

  /**
   * The round trip through the bottleneck queues, probed with a request the
   * server refuses at once (a SUBSCRIBE outside the room): the only delay signal
   * a publisher has where the browser offers no WebTransport.getStats(), and the
   * one that shows a queue building in stream mode, where QUIC hides loss.
   */
  readonly probe = { rttMs: 0, minRttMs: Infinity, samples: 0, pendingSince: 0 };
  /**
   * The lowest round trip of the session, from its start: half the handshake
   * (QUIC's and the CONNECT's round trips, never less than two) and every
   * request's answer, the first ones before any media queued. A minimum learned
   * only once media flows would be taken on a queued path and hide the queue.
   */
  private pathMinRtt = Infinity;
  private probing = false;
  private probeWindow: number[] = [];

  private async probeRtt(): Promise<void> {
    if (this.probing || this.closed) return;
    this.probing = true;
    const t0 = performance.now();
    this.probe.pendingSince = t0;
    this.probe.minRttMs = Math.min(this.probe.minRttMs, this.pathMinRtt);
    try {
      const { req } = await this.request((id) => subscribeMessage(id, ['petrel', '.rtt-probe'], 'rtt'));
      const ms = performance.now() - t0;
      req.writer.close().catch(() => {});
      const p = this.probe;
      p.samples++;
      // The median of the last five: a busy page (timers late by tens of ms on a
      // loaded machine) must not read as a queue in the network.
      this.probeWindow.push(ms);
      if (this.probeWindow.length > 5) this.probeWindow.shift();
      p.rttMs = [...this.probeWindow].sort((a, b) => a - b)[Math.floor(this.probeWindow.length / 2)];
      p.minRttMs = Math.min(this.pathMinRtt, ms);
      this.pathMinRtt = p.minRttMs;
    } catch {
      /* the session is closing */
    } finally {
      this.probing = false;
      this.probe.pendingSince = 0;
    }
  }

  private async pollRtt(): Promise<void> {
    try {
      const st = (await (this.transport as unknown as { getStats(): Promise<{ smoothedRtt?: number }> }).getStats()) ?? {};
      if (st.smoothedRtt && st.smoothedRtt > 0) {
        this.rtt = st.smoothedRtt;
        this.rttFromStats = true;
      }
    } catch {
      /* optional */
    }
  }

  // ---- incoming streams and datagrams

  private async acceptUni(): Promise<void> {
    const r = this.transport.incomingUnidirectionalStreams.getReader();
    for (;;) {
      let x: ReadableStreamReadResult<ReadableStream<Uint8Array>>;
      try {
        x = await r.read();
      } catch {
        return;
      }
      if (x.done) return;
      void this.onUni(new StreamReader(x.value));
    }
  }

  private async onUni(r: StreamReader): Promise<void> {
    try {
      const type = await r.vi();
      if (type === Msg.SETUP) {
        // The server's control stream: SETUP, then GOAWAY at most.
        const len = await r.exact(2);
        const body = await r.exact((len[0] << 8) | len[1]);
        void body;
        for (;;) {
          const m = parseMessage(await r.message());
          if (m.type === Msg.GOAWAY) this.log(`server going away (${m.uri || 'no new URI'})`);
        }
      }
      const layout = subgroupLayout(type);
      if (!layout) throw new WireError(`unknown stream type 0x${type.toString(16)}`);
      const alias = await r.vi();
      const group = await r.vi();
      if (layout.explicitSubgroup) await r.vi();
      if (layout.priority) await r.u8();
      // The stream may overtake the SUBSCRIBE_OK that names its alias.
      if (alias !== this.eventsAlias && !this.byAlias.has(alias)) await this.aliasKnown(alias);
      if (alias === this.eventsAlias) return await readEventObjects(r, layout.ext, (j) => this.onEventObject(group, j));
      const t = this.byAlias.get(alias);
      if (!t) {
        r.cancel();
        return;
      }
      await t.readStream(r, group, layout.ext);
    } catch (e) {
      if (e instanceof WireError) this.log(`stream: ${e.message}`);
    }
  }

  private async readDatagrams(): Promise<void> {
    const r = this.transport.datagrams.readable.getReader();
    for (;;) {
      let x: ReadableStreamReadResult<Uint8Array>;
      try {
        x = await r.read();
      } catch {
        return;
      }
      if (x.done) return;
      try {
        const d = parseDatagram(x.value);
        if (d.type === Dgram.FRAGMENT || d.type === Dgram.FEC) {
          const t = this.byAlias.get(d.alias);
          if (t) t.onDatagram(d);
          else this.keepEarly(d);
        }
        else if (d.type === Dgram.NACK) this.localByAlias.get(d.alias)?.onNack(d);
        else if (d.type === Dgram.KEYFRAME_REQUEST) this.localByAlias.get(d.alias)?.requestKeyframe();
      } catch (e) {
        if (e instanceof WireError) this.log(`datagram: ${e.message}`);
      }
    }
  }

  // Media datagrams can overtake the SUBSCRIBE_OK that names their alias (it
  // is on a stream: a lost packet holds it for QUIC's retransmission, the
  // datagrams behind it are not held). The first keyframe would be lost with
  // them, and the start would wait for a keyframe request's round trip: they
  // are kept for a moment and replayed once the alias is known.
  private early: { at: number; d: ParsedDatagram }[] = [];
  earlyDatagrams = 0;

  private keepEarly(d: ParsedDatagram): void {
    const now = performance.now();
    while (this.early.length && (this.early.length >= 512 || now - this.early[0].at > 2_000)) this.early.shift();
    this.early.push({ at: now, d });
  }

  private replayEarly(alias: number, t: WtRemoteTrack): void {
    const mine = this.early.filter((e) => e.d.alias === alias);
    if (!mine.length) return;
    this.early = this.early.filter((e) => e.d.alias !== alias);
    this.earlyDatagrams += mine.length;
    for (const e of mine) t.onDatagram(e.d);
  }

  // The server's requests: SUBSCRIBE to our tracks after PUBLISH_NAMESPACE.
  private async acceptBidi(): Promise<void> {
    const r = this.transport.incomingBidirectionalStreams.getReader();
    for (;;) {
      let x: ReadableStreamReadResult<WebTransportBidirectionalStream>;
      try {
        x = await r.read();
      } catch {
        return;
      }
      if (x.done) return;
      void this.onServerRequest(x.value);
    }
  }

  private async onServerRequest(bidi: WebTransportBidirectionalStream): Promise<void> {
    const r = new StreamReader(bidi.readable);
    const w = bidi.writable.getWriter();
    let reqId = -1;
    try {
      const m = parseMessage(await r.message());
      if (m.type !== Msg.SUBSCRIBE) {
        this.log(`unexpected request type ${m.type}`);
        await w.close();
        return;
      }
      reqId = m.requestId;
      const mine = m.ns.length === 3 && m.ns[0] === 'petrel' && m.ns[1] === this.room && m.ns[2] === this.identity;
      const lt = mine ? this.local.get(m.track) : undefined;
      if (!lt && !(mine && m.track === 'data')) {
        await w.write(requestErrorMessage(RequestErrorCode.DOES_NOT_EXIST, `no track ${m.track}`));
        await w.close();
        return;
      }
      const alias = this.nextAlias++;
      await w.write(subscribeOkMessage(alias));
      this.serverRequests.set(reqId, { name: m.track, writer: w });
      if (lt) {
        this.localByAlias.set(alias, lt);
        lt.start(alias);
      } else {
        this.dataAlias = alias;
      }
      // The request lives until the server closes it or sends UNSUBSCRIBE.
      try {
        for (;;) {
          const next = parseMessage(await r.message());
          if (next.type === Msg.UNSUBSCRIBE) break;
        }
      } catch {
        /* stream ended: the subscription with it */
      }
      this.serverRequests.delete(reqId);
      if (lt) {
        this.localByAlias.delete(alias);
        lt.stop();
      } else if (this.dataAlias === alias) this.dataAlias = -1;
    } catch (e) {
      if (e instanceof WireError) {
        this.log(`server request: ${e.message}`);
        if (reqId >= 0) w.write(requestErrorMessage(RequestErrorCode.NOT_SUPPORTED, e.message)).catch(() => {});
      }
    }
  }

  // ---- requests we make

  private async request(msg: (id: number) => Uint8Array): Promise<{ req: Request; reply: ReturnType<typeof parseMessage> }> {
    const id = this.nextRequest;
    this.nextRequest += 2;
    // Requests (SUBSCRIBE, the RTT probe) and the control stream go ahead of any
    // media stream (video's send order is its group number, audio's 2^40).
    const bidi = await this.transport.createBidirectionalStream({ sendOrder: CONTROL_SEND_ORDER } as WebTransportSendStreamOptions);
    const req: Request = { id, writer: bidi.writable.getWriter(), reader: new StreamReader(bidi.readable) };
    const t0 = performance.now();
    await req.writer.write(msg(id));
    // A request the server never answers must not hang the caller (publish, subscribe).
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<never>((_, rej) => {
      timer = setTimeout(() => rej(new PetrelError('webtransport', `no answer to request ${id} within 10 s`)), 10_000);
    });
    try {
      const reply = parseMessage(await Promise.race([req.reader.message(), timeout]));
      this.pathMinRtt = Math.min(this.pathMinRtt, performance.now() - t0);
      return { req, reply };
    } catch (e) {
      req.writer.abort().catch(() => {});
      throw e;
    } finally {
      clearTimeout(timer);
    }
  }

  private async subscribeEvents(): Promise<void> {
    try {
      const { reply } = await this.request((id) => subscribeMessage(id, ['petrel', this.room], 'events'));
      if (reply.type !== Msg.SUBSCRIBE_OK) throw new PetrelError('webtransport', `events: ${describeReply(reply)}`);
      this.eventsAlias = reply.alias;
      this.aliasReady(reply.alias);
    } catch (e) {
      this.joinFailed(e instanceof Error ? e : new Error(String(e)));
    }
  }

  // Events arrive one object per group, each group on its own stream, so they may
  // overtake each other: they are applied in group order.
  private eventQueue = new Map<number, Record<string, unknown>>();
  private nextEventGroup = -1;
  private eventGapTimer?: ReturnType<typeof setTimeout>;

  private aliasWaiters = new Map<number, (() => void)[]>();

  private aliasKnown(alias: number): Promise<void> {
    return new Promise((res) => {
      const t = setTimeout(res, 2_000);
      const list = this.aliasWaiters.get(alias) ?? [];
      list.push(() => {
        clearTimeout(t);
        res();
      });
      this.aliasWaiters.set(alias, list);
    });
  }

  private aliasReady(alias: number): void {
    for (const f of this.aliasWaiters.get(alias) ?? []) f();
    this.aliasWaiters.delete(alias);
  }

  private onEventObject(group: number, json: Record<string, unknown>): void {
    if (this.nextEventGroup < 0 || json.type === 'joined') this.nextEventGroup = group;
    this.eventQueue.set(group, json);
    this.flushEvents();
  }

  private flushEvents(): void {
    clearTimeout(this.eventGapTimer);
    while (this.eventQueue.has(this.nextEventGroup)) {
      const m = this.eventQueue.get(this.nextEventGroup)!;
      this.eventQueue.delete(this.nextEventGroup);
      this.nextEventGroup++;
      this.onEvent(m);
    }
    if (this.eventQueue.size) {
      // A missing group (its stream reset?) must not stall the room state.
      this.eventGapTimer = setTimeout(() => {
        this.nextEventGroup = Math.min(...this.eventQueue.keys());
        this.flushEvents();
      }, 500);
    }
  }

  private participantOf(info: ParticipantInfo): WtParticipant {
    let p = this.participants.get(info.sid);
    if (!p) {
      p = { sid: info.sid, identity: info.identity, name: info.name || info.identity, tracks: new Map() };
      this.participants.set(info.sid, p);
    }
    return p;
  }

  private onEvent(m: Record<string, unknown>): void {
    this.emit('event', m);
    switch (m.type) {
      case 'joined': {
        this.participantSid = String(m.participantSid ?? '');
        for (const info of (m.participants as ParticipantInfo[] | null) ?? []) {
          if (info.sid === this.participantSid) continue;
          const p = this.participantOf(info);
          this.emit('participantJoined', p);
          for (const t of info.tracks ?? []) this.addTrack(p, t as WtTrackInfo);
        }
        this.joined();
        break;
      }
      case 'participantJoined': {
        const info = m.participant as ParticipantInfo;
        if (info.sid === this.participantSid) break;
        const known = this.participants.has(info.sid);
        const p = this.participantOf(info);
        if (!known) this.emit('participantJoined', p);
        for (const t of info.tracks ?? []) this.addTrack(p, t as WtTrackInfo);
        break;
      }
      case 'participantUpdated': {
        const info = m.participant as ParticipantInfo;
        const p = this.participants.get(info.sid);
        if (p) for (const t of info.tracks ?? []) this.addTrack(p, t as WtTrackInfo);
        break;
      }
      case 'participantLeft': {
        const p = this.participants.get(String(m.participantSid));
        if (!p) break;
        for (const t of [...p.tracks.values()]) this.removeTrack(p, t.sid);
        this.participants.delete(p.sid);
        this.emit('participantLeft', p);
        break;
      }
      case 'trackPublished': {
        const p = this.participants.get(String(m.participantSid));
        if (p) this.addTrack(p, m.track as WtTrackInfo);
        break;
      }
      case 'trackUnpublished': {
        const p = this.participants.get(String(m.participantSid));
        if (p) this.removeTrack(p, String(m.trackSid));
        break;
      }
      case 'data': {
        const payload = Uint8Array.from(atob(String(m.payload ?? '')), (c) => c.charCodeAt(0));
        this.emit('dataReceived', {
          from: m.from as string | undefined,
          fromSid: m.fromSid as string | undefined,
          topic: m.topic as string | undefined,
          text: m.text ? dec.decode(payload) : undefined,
          payload,
        });
        break;
      }
    }
  }

  private addTrack(p: WtParticipant, t: WtTrackInfo): void {
    if (p.tracks.has(t.sid)) return;
    p.tracks.set(t.sid, t);
    this.emit('trackPublished', t, p);
    if (this.autoSubscribe) void this.subscribe(p, t).catch((e) => this.log(`subscribe ${p.identity}/${t.sid}: ${(e as Error).message}`));
  }

  private removeTrack(p: WtParticipant, sid: string): void {
    const t = p.tracks.get(sid);
    if (!t) return;
    p.tracks.delete(sid);
    for (const [id, s] of this.subscriptions) {
      if (s.participant === p && s.info.sid === sid) this.endSubscription(id);
    }
    this.emit('trackUnpublished', t, p);
  }

  /** Subscribes to a participant's track; resolves when frames can flow. */
  async subscribe(p: WtParticipant, t: WtTrackInfo, mode: WtMode = this.mode): Promise<WtSubscription> {
    const params: Pairs = new Map();
    if (mode === 'datagram') params.set(PARAM_DATAGRAM, 1);
    const name = moqTrackName(t);
    const { req, reply } = await this.request((id) => subscribeMessage(id, ['petrel', this.room, p.identity], name, params));
    if (reply.type !== Msg.SUBSCRIBE_OK) {
      req.writer.close().catch(() => {});
      throw new PetrelError('webtransport', `subscribe ${name}: ${describeReply(reply)}`);
    }
    const remote = new WtRemoteTrack(t.kind, mode, reply.alias, this, this.repairHold);
    this.byAlias.set(reply.alias, remote);
    this.aliasReady(reply.alias);
    this.replayEarly(reply.alias, remote);
    const sub: WtSubscription = { participant: p, info: t, remote, track: remote.track };
    this.subscriptions.set(req.id, sub);
    (sub as unknown as { req: Request }).req = req;
    this.emit('trackSubscribed', sub);
    // A PUBLISH_DONE or the stream ending ends the subscription.
    void (async () => {
      try {
        for (;;) {
          const m = parseMessage(await req.reader.message());
          if (m.type === Msg.PUBLISH_DONE) break;
        }
      } catch {
        /* ended */
      }
      this.endSubscription(req.id);
    })();
    return sub;
  }

  unsubscribe(s: WtSubscription): void {
    for (const [id, x] of this.subscriptions) if (x === s) this.endSubscription(id, true);
  }

  private endSubscription(id: number, tell = false): void {
    const s = this.subscriptions.get(id);
    if (!s) return;
    this.subscriptions.delete(id);
    this.byAlias.delete(s.remote.alias);
    const req = (s as unknown as { req: Request }).req;
    if (tell) req.writer.write(unsubscribeMessage()).catch(() => {});
    req.writer.close().catch(() => {});
    s.remote.close();
    this.emit('trackUnsubscribed', s);
  }

  // ---- publishing

  /**
   * Publishes camera and/or microphone. The server subscribes to them after our
   * PUBLISH_NAMESPACE; encoding starts then. Call once per session.
   */
  async publish(tracks: { video?: MediaStreamTrack; audio?: MediaStreamTrack }, o: WtPublishOptions = {}): Promise<WtLocalTrack[]> {
    if (this.announce) throw new PetrelError('webtransport', 'already publishing');
    const out: WtLocalTrack[] = [];
    for (const t of [tracks.video, tracks.audio]) {
      if (!t) continue;
      const lt = new WtLocalTrack(t, this, { ...o, mode: o.mode ?? this.mode });
      this.local.set(lt.name, lt);
      out.push(lt);
    }
    const { req, reply } = await this.request((id) => publishNamespaceMessage(id, ['petrel', this.room, this.identity]));
    if (reply.type !== Msg.REQUEST_OK) {
      for (const lt of out) {
        lt.close();
        this.local.delete(lt.name);
      }
      throw new PetrelError('webtransport', `publish: ${describeReply(reply)}`);
    }
    this.announce = req;
    return out;
  }

  /** Stops publishing everything (the server sees the namespace go). */
  unpublish(): void {
    for (const lt of this.local.values()) lt.close();
    this.local.clear();
    this.localByAlias.clear();
    this.announce?.writer.close().catch(() => {});
    this.announce = undefined;
  }

  /** Sends a data message to the room (or to `to`), through our `data` track. */
  async sendData(payload: string | Uint8Array, o: { to?: string[]; topic?: string } = {}): Promise<void> {
    if (this.dataAlias < 0) throw new PetrelError('webtransport', 'data needs publish() first (the server subscribes to our data track)');
    const text = typeof payload === 'string';
    const bytes = text ? enc.encode(payload) : payload;
    let bin = '';
    for (const b of bytes) bin += String.fromCharCode(b);
    const body = enc.encode(JSON.stringify({ topic: o.topic, to: o.to, text, payload: btoa(bin) }));
    const s = await this.transport.createUnidirectionalStream();
    const w = s.getWriter();
    const group = this.dataGroup++;
    await w.write(subgroupHeader(this.dataAlias, group, 0, 0));
    await w.write(streamObject(0, { tsUs: Math.round(performance.now() * 1000), key: true }, body));
    await w.close();
  }

  getLocal(kind: 'audio' | 'video'): WtLocalTrack | undefined {
    return this.local.get(kind);
  }

  async getStats(): Promise<WtStats> {
    let transport: unknown;
    try {
      transport = await (this.transport as unknown as { getStats(): Promise<unknown> }).getStats();
    } catch {
      /* optional */
    }
    return {
      rttMs: this.rtt,
      connectMs: this.connectMs,
      local: [...this.local.values()].map((l) => l.getStats()),
      remote: [...this.subscriptions.values()].map((s) => ({ ...s.remote.getStats(), participant: s.participant.identity, trackSid: s.info.sid })),
      transport,
    };
  }

  private shutdown(reason: string): void {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.statsTimer);
    clearInterval(this.probeTimer);
    for (const id of [...this.subscriptions.keys()]) this.endSubscription(id);
    for (const lt of this.local.values()) lt.close();
    this.joinFailed(new PetrelError('webtransport', reason));
    this.emit('disconnected', reason);
  }

  close(): void {
    if (this.closed) return;
    try {
      this.transport.close({ closeCode: 0, reason: 'leave' });
    } catch {
      /* already closed */
    }
    this.shutdown('left');
  }
}

/** The MoQT track name of a published track: as announced, else by its source (docs/protocol.md table). */
export function moqTrackName(t: WtTrackInfo): string {
  if (t.moqTrack) return t.moqTrack;
  const bySource: Record<string, string> = { camera: 'video', microphone: 'audio', screen: 'screen', screen_audio: 'screen_audio' };
  return bySource[t.source] ?? t.sid;
}

// Objects of the events track: each is one JSON message.
export async function readEventObjects(r: StreamReader, hasExt: boolean, onObject: (json: Record<string, unknown>) => void): Promise<void> {
  // Events need no metadata: the extension headers are skipped.
  for await (const o of streamObjects(r, hasExt, 1 << 20)) {
    let json: unknown;
    try {
      json = JSON.parse(dec.decode(o.payload));
    } catch {
      throw new WireError('event object is not JSON');
    }
    if (json && typeof json === 'object') onObject(json as Record<string, unknown>);
  }
}
