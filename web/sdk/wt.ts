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
import { PetrelError } from './protocol.js';
import { type Pairs, WireError } from './wtbytes.js';
import type { WtCarrier, WtMode } from './wtcarrier.js';
import { Dgram, type ParsedDatagram, parseDatagram } from './wtdgram.js';
import { type WtEndpointOptions, tokenClaims, wtEndpoint } from './wtendpoint.js';
import { EventOrder, WtRoster, type WtDataMessage, type WtParticipant, type WtTrackInfo, readEventObjects } from './wtevents.js';
import type { WtLocalStats, WtLocalTrack, WtPublishOptions } from './wtlocal.js';
import { WtPublisher } from './wtpublisher.js';
import { WtRemoteTrack, type WtRemoteStats, type WtRepairHold } from './wtremote.js';
import { RttEstimator } from './wtrtt.js';
import { StreamReader } from './wtstream.js';
import { MOQT_VERSION, Msg, PARAM_DATAGRAM, Setup, describeReply, parseMessage, setupMessage, subgroupLayout, subscribeMessage, unsubscribeMessage } from './wtwire.js';

export type { WtMode } from './wtcarrier.js';
export type { WtDataMessage, WtParticipant, WtTrackInfo } from './wtevents.js';
export { wtEndpoint } from './wtendpoint.js';

export interface WtConnectOptions extends WtEndpointOptions {
  /** Delivery asked for on subscriptions (default 'datagram'). */
  mode?: WtMode;
  /** Subscribe to every track in the room (default true). */
  autoSubscribe?: boolean;
  /**
   * How a datagram subscriber waits for retransmissions: 'gaps' (default) holds
   * only frames behind a missing one; 'floor' is the earlier whole-stream
   * delay, kept for A/B runs of the lab comparison (bench/wt).
   */
  repairHold?: WtRepairHold;
}

export interface WtSubscription {
  participant: WtParticipant;
  info: WtTrackInfo;
  remote: WtRemoteTrack;
  readonly track: MediaStreamTrack;
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
/** Control and request streams: ahead of every media stream's send order. */
const CONTROL_SEND_ORDER = 2 ** 50;

export class WtSession extends Emitter<WtEvents> implements WtCarrier {
  readonly transport: WebTransport;
  readonly room: string;
  readonly identity: string;
  private readonly roster: WtRoster;
  private readonly eventOrder: EventOrder;
  readonly subscriptions = new Map<number, WtSubscription>(); // by request id
  private readonly byAlias = new Map<number, WtRemoteTrack>();
  private readonly publisher: WtPublisher;
  private nextRequest = 0;
  private dgramWriter: WritableStreamDefaultWriter<Uint8Array>;
  private control?: WritableStreamDefaultWriter<Uint8Array>;
  private eventsAlias = -1;
  private readonly rtt = new RttEstimator();
  private statsTimer?: ReturnType<typeof setInterval>;
  private probeTimer?: ReturnType<typeof setInterval>;
  private closed = false;
  private readonly started = performance.now();
  connectMs = 0;
  private joined!: (v: void) => void;
  private joinFailed!: (e: Error) => void;
  private readonly joinedP: Promise<void>;
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
    this.publisher = new WtPublisher(this, ['petrel', this.room, this.identity], (msg) => this.request(msg));
    this.roster = new WtRoster({
      joined: () => this.joined(),
      participantJoined: (p) => this.emit('participantJoined', p),
      participantLeft: (p) => this.emit('participantLeft', p),
      trackPublished: (t, p) => {
        this.emit('trackPublished', t, p);
        if (this.autoSubscribe) void this.subscribe(p, t).catch((e) => this.log(`subscribe ${p.identity}/${t.sid}: ${(e as Error).message}`));
      },
      trackUnpublished: (t, p) => {
        for (const [id, s] of this.subscriptions) if (s.participant === p && s.info.sid === t.sid) this.endSubscription(id);
        this.emit('trackUnpublished', t, p);
      },
      data: (m) => this.emit('dataReceived', m),
    });
    this.eventOrder = new EventOrder((m) => {
      this.emit('event', m);
      this.roster.apply(m);
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
    s.rtt.requestAnswered((performance.now() - s.started) / 2);
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

  /** Our own participant sid, from the room state. */
  get participantSid(): string {
    return this.roster.participantSid;
  }

  /** The other participants, by sid. */
  get participants(): ReadonlyMap<string, WtParticipant> {
    return this.roster.participants;
  }

  get rttMs(): number {
    return this.rtt.rttMs;
  }

  noteRtt(ms: number): void {
    // Chromium 156 has no WebTransport.getStats(): NACK round trips are the estimate then.
    this.rtt.nackAnswered(ms);
  }

  /** The probed round trip and the path's minimum (the rate controller's delay signal). */
  get probe(): RttEstimator['probe'] {
    return this.rtt.probe;
  }

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
      if (this.publisher.publishing) void this.probeRtt();
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
  private probing = false;

  private async probeRtt(): Promise<void> {
    if (this.probing || this.closed) return;
    this.probing = true;
    const t0 = performance.now();
    this.rtt.probeSent(t0);
    try {
      const { req } = await this.request((id) => subscribeMessage(id, ['petrel', '.rtt-probe'], 'rtt'));
      this.rtt.probeAnswered(performance.now() - t0);
      req.writer.close().catch(() => {});
    } catch {
      /* the session is closing */
    } finally {
      this.probing = false;
      this.rtt.probeEnded();
    }
  }

  private async pollRtt(): Promise<void> {
    try {
      const st = (await (this.transport as unknown as { getStats(): Promise<{ smoothedRtt?: number }> }).getStats()) ?? {};
      this.rtt.fromBrowser(st.smoothedRtt);
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
      if (alias === this.eventsAlias) return await readEventObjects(r, layout.ext, (j) => this.eventOrder.push(group, j));
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
        else this.publisher.onDatagram(d);
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

  // The server's requests (SUBSCRIBE to what we publish) go to the publisher.
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
      void this.publisher.onServerRequest(x.value);
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
      this.rtt.requestAnswered(performance.now() - t0);
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
    return this.publisher.publish(tracks, { ...o, mode: o.mode ?? this.mode });
  }

  /** Stops publishing everything (the server sees the namespace go). */
  unpublish(): void {
    this.publisher.unpublish();
  }

  /** Sends a data message to the room (or to `to`), through our `data` track. */
  async sendData(payload: string | Uint8Array, o: { to?: string[]; topic?: string } = {}): Promise<void> {
    return this.publisher.sendData(payload, o);
  }

  getLocal(kind: 'audio' | 'video'): WtLocalTrack | undefined {
    return this.publisher.get(kind);
  }

  async getStats(): Promise<WtStats> {
    let transport: unknown;
    try {
      transport = await (this.transport as unknown as { getStats(): Promise<unknown> }).getStats();
    } catch {
      /* optional */
    }
    return {
      rttMs: this.rtt.rttMs,
      connectMs: this.connectMs,
      local: this.publisher.stats(),
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
    this.publisher.close();
    this.eventOrder.close();
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

