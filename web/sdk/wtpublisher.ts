// What a WebTransport session publishes: its camera and microphone tracks and
// its data track, announced with PUBLISH_NAMESPACE, started and stopped as the
// server subscribes to them (the server's requests), and data messages sent as
// objects of the data track.
import { PetrelError } from './protocol.js';
import { WireError } from './wtbytes.js';
import type { WtCarrier } from './wtcarrier.js';
import { Dgram, type ParsedDatagram } from './wtdgram.js';
import { WtLocalTrack, type WtLocalStats, type WtPublishOptions } from './wtlocal.js';
import { StreamReader } from './wtstream.js';
import {
  Msg,
  type ParsedRequest,
  RequestErrorCode,
  describeReply,
  parseMessage,
  publishNamespaceMessage,
  requestErrorMessage,
  streamObject,
  subgroupHeader,
  subscribeOkMessage,
} from './wtwire.js';

/** Sends a request on a new stream and waits for its answer (the session's). */
export type Requester = (msg: (id: number) => Uint8Array) => Promise<{ req: { writer: WritableStreamDefaultWriter<Uint8Array> }; reply: ParsedRequest }>;

const enc = new TextEncoder();

export class WtPublisher {
  private readonly local = new Map<string, WtLocalTrack>(); // by track name
  private readonly byAlias = new Map<number, WtLocalTrack>();
  private nextAlias = 1;
  private dataAlias = -1;
  private dataGroup = 0;
  private announce?: WritableStreamDefaultWriter<Uint8Array>;

  constructor(
    private readonly carrier: WtCarrier,
    /** Our namespace: petrel, room, identity. */
    private readonly ns: readonly string[],
    private readonly request: Requester,
  ) {}

  /** True while any track is published. */
  get publishing(): boolean {
    return this.local.size > 0;
  }

  async publish(tracks: { video?: MediaStreamTrack; audio?: MediaStreamTrack }, o: WtPublishOptions): Promise<WtLocalTrack[]> {
    if (this.announce) throw new PetrelError('webtransport', 'already publishing');
    const out: WtLocalTrack[] = [];
    for (const t of [tracks.video, tracks.audio]) {
      if (!t) continue;
      const lt = new WtLocalTrack(t, this.carrier, o);
      this.local.set(lt.name, lt);
      out.push(lt);
    }
    const { req, reply } = await this.request((id) => publishNamespaceMessage(id, [...this.ns]));
    if (reply.type !== Msg.REQUEST_OK) {
      for (const lt of out) {
        lt.close();
        this.local.delete(lt.name);
      }
      throw new PetrelError('webtransport', `publish: ${describeReply(reply)}`);
    }
    this.announce = req.writer;
    return out;
  }

  unpublish(): void {
    for (const lt of this.local.values()) lt.close();
    this.local.clear();
    this.byAlias.clear();
    this.announce?.close().catch(() => {});
    this.announce = undefined;
  }

  /** A NACK or KEYFRAME_REQUEST datagram for one of our tracks. */
  onDatagram(d: ParsedDatagram): void {
    if (d.type === Dgram.NACK) this.byAlias.get(d.alias)?.onNack(d);
    else if (d.type === Dgram.KEYFRAME_REQUEST) this.byAlias.get(d.alias)?.requestKeyframe();
  }

  /** One of the server's requests: a SUBSCRIBE to our tracks after PUBLISH_NAMESPACE. */
  async onServerRequest(bidi: WebTransportBidirectionalStream): Promise<void> {
    const r = new StreamReader(bidi.readable);
    const w = bidi.writable.getWriter();
    let reqId = -1;
    try {
      const m = parseMessage(await r.message());
      if (m.type !== Msg.SUBSCRIBE) {
        this.carrier.log(`unexpected request type ${m.type}`);
        await w.close();
        return;
      }
      reqId = m.requestId;
      const mine = m.ns.length === this.ns.length && m.ns.every((f, i) => f === this.ns[i]);
      const lt = mine ? this.local.get(m.track) : undefined;
      if (!lt && !(mine && m.track === 'data')) {
        await w.write(requestErrorMessage(RequestErrorCode.DOES_NOT_EXIST, `no track ${m.track}`));
        await w.close();
        return;
      }
      const alias = this.nextAlias++;
      await w.write(subscribeOkMessage(alias));
      if (lt) {
        this.byAlias.set(alias, lt);
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
      if (lt) {
        this.byAlias.delete(alias);
        lt.stop();
      } else if (this.dataAlias === alias) this.dataAlias = -1;
    } catch (e) {
      if (e instanceof WireError) {
        this.carrier.log(`server request: ${e.message}`);
        if (reqId >= 0) w.write(requestErrorMessage(RequestErrorCode.NOT_SUPPORTED, e.message)).catch(() => {});
      }
    }
  }

  async sendData(payload: string | Uint8Array, o: { to?: string[]; topic?: string }): Promise<void> {
    if (this.dataAlias < 0) throw new PetrelError('webtransport', 'data needs publish() first (the server subscribes to our data track)');
    const text = typeof payload === 'string';
    const bytes = text ? enc.encode(payload) : payload;
    let bin = '';
    for (const b of bytes) bin += String.fromCharCode(b);
    const body = enc.encode(JSON.stringify({ topic: o.topic, to: o.to, text, payload: btoa(bin) }));
    const s = await this.carrier.transport.createUnidirectionalStream();
    const w = s.getWriter();
    const group = this.dataGroup++;
    await w.write(subgroupHeader(this.dataAlias, group, 0, 0));
    await w.write(streamObject(0, { tsUs: Math.round(performance.now() * 1000), key: true }, body));
    await w.close();
  }

  get(kind: 'audio' | 'video'): WtLocalTrack | undefined {
    return this.local.get(kind);
  }

  stats(): WtLocalStats[] {
    return [...this.local.values()].map((l) => l.getStats());
  }

  close(): void {
    for (const lt of this.local.values()) lt.close();
  }
}
