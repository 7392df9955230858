// A move to another node of the cluster (the server's reconnect hint: it drains,
// or the room is re-placed), make before break: join there with a second
// session (session.ts: the same signaling and transports as the room's), publish
// the same tracks with the same encodings, and hand the session to the room only
// when it decodes everyone's video (MOVE_MEDIA_WAIT_MS at most). Until then the
// new node's messages only keep a view of who is there (NodeView).
import { FATAL_CODES, type ClientMessage, type JoinedMessage, type ParticipantInfo, type ServerMessage } from './protocol.js';
import type { MsidInfo } from './sdp.js';
import { simulcastLayers, type TrackSpec } from './publisher.js';
import { LocalTrackPublication } from './roomtypes.js';
import type { Session, SessionHandlers } from './session.js';

export const MOVE_MEDIA_WAIT_MS = 4_000;
// ...and then this long more, for those still on the old node: they get our new
// stream through the node link (a mirror beside our old session) only after a
// subscriber renegotiation and a keyframe there.
const MOVE_OVERLAP_MS = 500;

export type Demand = { active: boolean; layers?: boolean[] };

/** The new node as its messages describe it before the room adopts the session. */
export class NodeView {
  readonly parts = new Map<string, ParticipantInfo>();
  readonly demands = new Map<string, Demand>();
  /** Why the move cannot go on ('' while it can). */
  failed = '';

  init(joined: JoinedMessage): void {
    for (const info of joined.participants ?? []) if (info.sid !== joined.participant.sid) this.parts.set(info.sid, info);
  }

  apply(msg: ServerMessage): void {
    switch (msg.type) {
      case 'participantJoined':
      case 'participantUpdated':
        this.parts.set(msg.participant.sid, msg.participant);
        break;
      case 'participantLeft':
        this.parts.delete(msg.participantSid);
        break;
      case 'trackPublished':
      case 'trackUnpublished': {
        const info = this.parts.get(msg.participantSid);
        if (!info) break;
        const sid = msg.type === 'trackPublished' ? msg.track.sid : msg.trackSid;
        const rest = (info.tracks ?? []).filter((t) => t.sid !== sid);
        this.parts.set(info.sid, { ...info, tracks: msg.type === 'trackPublished' ? [...rest, msg.track] : rest });
        break;
      }
      case 'trackDemand':
        this.demands.set(msg.trackSid, { active: msg.active, layers: msg.layers });
        break;
      case 'leave':
        this.failed = `the new node said leave (${msg.reason})`;
        break;
      case 'error':
        if (FATAL_CODES.has(msg.code)) this.failed = `the new node refused: ${msg.code}`;
        break;
      default:
        break;
    }
  }

  /** Identities whose video has decoded frames on the subscriber (stats report entries, mid map). */
  decoded(stats: Iterable<{ type?: string; kind?: string; framesDecoded?: number; mid?: unknown }>, mids: Map<string, MsidInfo>): Set<string> {
    const out = new Set<string>();
    for (const r of stats) {
      if (r.type !== 'inbound-rtp' || r.kind !== 'video' || !((r.framesDecoded ?? 0) > 0)) continue;
      const m = r.mid !== undefined ? mids.get(String(r.mid)) : undefined;
      const who = m ? this.parts.get(m.streamId)?.identity : undefined;
      if (who) out.add(who);
    }
    return out;
  }
}

/** How to publish `old` again on another connection: the same layers, encodings and codec. */
export function moveSpec(old: LocalTrackPublication): TrackSpec {
  const params = old.transceiver.sender.getParameters();
  const encodings = params.encodings ?? [];
  const mode = (e: RTCRtpEncodingParameters) => (e as { scalabilityMode?: string }).scalabilityMode;
  const several = encodings.length > 1 || encodings.some((e) => mode(e));
  const mime = params.codecs?.[0]?.mimeType;
  return {
    source: old.source,
    name: old.info.name ?? '',
    layers: old.simulcast && old.track.kind === 'video' ? simulcastLayers(old.track.getSettings()) : undefined,
    sendEncodings: several
      ? encodings.map((e) => ({ rid: e.rid, maxBitrate: e.maxBitrate, scaleResolutionDownBy: e.scaleResolutionDownBy, ...(mode(e) ? { scalabilityMode: mode(e) } : {}) }) as RTCRtpEncodingParameters)
      : undefined,
    codec: mime,
    dependencyDescriptor: !!mime && /av1/i.test(mime),
  };
}

/** What the room hands to a move, and takes back at the switch. */
export interface MoveHost {
  connected(): boolean;
  state(): string;
  joinMessage(): Extract<ClientMessage, { type: 'join' }>;
  rtcConfig(iceServers: RTCIceServer[]): RTCConfiguration;
  /** A session wired as the room's are (encryption hooks), with these handlers until adopted. */
  newSession(h: SessionHandlers): Session;
  readonly localTracks: ReadonlyMap<string, LocalTrackPublication>;
  /** Identities whose video the room shows now: the new node must bring them before the switch. */
  shownVideo(): Set<string>;
  /** Makes `session` the room's (the old one leaves after). */
  adopt(a: Adoption): void;
}

export interface Adoption {
  session: Session;
  joined: JoinedMessage;
  iceServers: RTCIceServer[];
  published: LocalTrackPublication[];
  view: NodeView;
  url: string;
  node?: string;
}

export function iceServersOf(joined: JoinedMessage): RTCIceServer[] {
  return (joined.iceServers ?? []).map((s) => ({ urls: s.urls, username: s.username, credential: s.credential }));
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Joins `url` beside the current session and switches to it; throws (closing what it made) if it cannot. */
export async function moveBeforeBreak(host: MoveHost, url: string, node: string | undefined, reason: string, waitMs = MOVE_MEDIA_WAIT_MS): Promise<void> {
  const t0 = performance.now();
  const view = new NodeView();
  let adopted = false;
  const next = host.newSession({
    message: (msg) => view.apply(msg),
    lost: (why) => (view.failed = `the new node's socket: ${why}`),
    subscriberFailed: (err) => (view.failed = `subscriber negotiation: ${err}`),
  });
  try {
    const joined = await next.join(url, host.joinMessage());
    view.init(joined);
    const iceServers = iceServersOf(joined);
    next.createTransports(host.rtcConfig(iceServers));
    const pub = next.publisher!;
    const sub = next.subscriber!;

    const published: LocalTrackPublication[] = [];
    for (const old of host.localTracks.values()) {
      if (old.track.readyState !== 'live') continue;
      const { info, transceiver } = await pub.publish(old.track, moveSpec(old));
      published.push(new LocalTrackPublication(info, old.track, transceiver, old.simulcast, old.autoSimulcast));
    }
    await pub.negotiate();

    // Wait until the new connections carry media both ways: ours out, and
    // the video of everyone we show decoded.
    const want = host.shownVideo();
    const deadline = performance.now() + waitMs;
    for (;;) {
      if (view.failed) throw new Error(`move: ${view.failed}`);
      if (!host.connected()) throw new Error(`move: room is ${host.state()}`);
      const stats = await sub.pc.getStats();
      const decoded = view.decoded(stats.values() as Iterable<{ type?: string }>, sub.mids);
      const sending = pub.pc.connectionState === 'connected' || published.length === 0;
      if (sending && [...want].every((id) => decoded.has(id))) {
        await sleep(MOVE_OVERLAP_MS);
        break;
      }
      if (performance.now() > deadline) {
        if (pub.pc.connectionState !== 'connected' && sub.pc.connectionState !== 'connected') throw new Error('move: the new connections did not connect');
        console.info(`petrel: moving without the video of ${[...want].filter((id) => !decoded.has(id)).join(', ') || 'none missing'} decoded`);
        break;
      }
      await sleep(100);
    }
    await sub.settled();
    adopted = true;
    host.adopt({ session: next, joined, iceServers, published, view, url, node });
    console.info(`petrel: moved to ${node ?? url} (${reason}) in ${Math.round(performance.now() - t0)} ms, before leaving`);
  } catch (err) {
    if (!adopted) next.close();
    throw err;
  }
}
