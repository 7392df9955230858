// The publisher transport: the peer connection this client offers on, carrying
// its tracks and the room's data channels. One offer/answer round at a time;
// tracks are announced to the server (publishTrack) before they enter the SDP.
import { CandidateBuffer, Serializer } from './negotiation.js';
import { negotiateDependencyDescriptor } from './svc.js';
import type { ClientMessage, LayerInfo, ServerMessage, TrackInfo, TrackKind, TrackSource } from './protocol.js';

/** The part of the signaling socket a transport uses. */
export interface SignalPort {
  send(msg: ClientMessage): void;
  request(msg: ClientMessage): Promise<ServerMessage>;
}

/** How a track is sent: what the server is told, and the encodings and codec of its sender. */
export interface TrackSpec {
  source: TrackSource;
  name: string;
  /** Announced simulcast (or SVC spatial) layers. */
  layers?: LayerInfo[];
  sendEncodings?: RTCRtpEncodingParameters[];
  /** Preferred codec mime type, e.g. 'video/VP9'. */
  codec?: string;
  /** Negotiate the dependency descriptor extension (AV1 SVC names its layers only there). */
  dependencyDescriptor?: boolean;
}

export class PublisherTransport {
  readonly reliable: RTCDataChannel;
  readonly lossy: RTCDataChannel;
  /** Called with each new sender before negotiation (end-to-end encryption attaches here). */
  onSender: (sender: RTCRtpSender, kind: string) => void = () => {};
  private negotiation = new Serializer((iceRestart) => this.round(iceRestart));
  private candidates: CandidateBuffer;
  private answerWaiter: ((sdp: string) => void) | null = null;
  /** The cid each sender's track was announced with (see withAnnouncedIds). */
  private cids = new WeakMap<RTCRtpSender, string>();

  constructor(
    readonly pc: RTCPeerConnection,
    private signal: SignalPort,
    private stream: MediaStream = new MediaStream(),
  ) {
    this.candidates = new CandidateBuffer(() => this.pc);
    // Both channels exist before the first offer so that the server sees them in it.
    this.reliable = pc.createDataChannel('_reliable', { ordered: true });
    this.lossy = pc.createDataChannel('_lossy', { ordered: false, maxRetransmits: 0 });
  }

  /** Resolves when an offer/answer round that started after this call has finished. */
  negotiate(opts: { iceRestart?: boolean } = {}): Promise<void> {
    return this.negotiation.negotiate(opts);
  }

  /** An `answer` message from the server (it may come without our request's id). */
  onAnswer(sdp: string): void {
    this.answerWaiter?.(sdp);
  }

  addCandidate(c: RTCIceCandidateInit | null): Promise<void> {
    return this.candidates.add(c);
  }

  /** Announces `track` to the server and adds its sender; the caller negotiates. */
  async publish(track: MediaStreamTrack, spec: TrackSpec): Promise<{ info: TrackInfo; transceiver: RTCRtpTransceiver }> {
    const settings = track.getSettings();
    // The server learns the track first and matches it to the SDP by msid (= track.id).
    const reply = await this.signal.request({
      type: 'publishTrack',
      cid: track.id,
      kind: track.kind as TrackKind,
      source: spec.source,
      name: spec.name,
      muted: !track.enabled,
      width: settings.width,
      height: settings.height,
      layers: spec.layers,
    });
    const info = (reply as { track?: TrackInfo }).track;
    if (!info) throw new Error('publishTrack: server reply has no track');
    this.stream.addTrack(track);
    const transceiver = this.pc.addTransceiver(track, { direction: 'sendonly', streams: [this.stream], sendEncodings: spec.sendEncodings });
    this.cids.set(transceiver.sender, track.id);
    if (spec.codec) preferCodec(transceiver, track.kind, spec.codec);
    if (spec.dependencyDescriptor) negotiateDependencyDescriptor(transceiver);
    this.onSender(transceiver.sender, track.kind);
    return { info, transceiver };
  }

  /** Takes a track's sender out; the caller tells the server and negotiates. */
  remove(track: MediaStreamTrack, sender: RTCRtpSender): void {
    this.cids.delete(sender);
    this.stream.removeTrack(track);
    if (this.pc.signalingState !== 'closed') this.pc.removeTrack(sender);
  }

  close(): void {
    this.candidates.clear();
    this.pc.close();
  }

  private async round(iceRestart: boolean): Promise<void> {
    const pc = this.pc;
    const offer = await pc.createOffer({ iceRestart });
    await pc.setLocalDescription(offer);
    try {
      // The answer comes as an `answer` message; take it whether or not it carries our id.
      const answered = new Promise<string>((resolve) => (this.answerWaiter = resolve));
      const cidByMid = new Map<string, string>();
      for (const t of pc.getTransceivers()) {
        const cid = this.cids.get(t.sender);
        if (cid && t.mid) cidByMid.set(t.mid, cid);
      }
      const replied = this.signal
        .request({ type: 'offer', sdp: withAnnouncedIds(offer.sdp ?? '', cidByMid) })
        .then((m) => ('sdp' in m && typeof m.sdp === 'string' ? m.sdp : answered));
      const sdp = await Promise.race([replied, answered]);
      if (pc.signalingState === 'closed') return;
      await pc.setRemoteDescription({ type: 'answer', sdp });
      await this.candidates.flush();
    } catch (err) {
      if (pc.signalingState === 'have-local-offer') await pc.setLocalDescription({ type: 'rollback' }).catch(() => {});
      throw err;
    } finally {
      this.answerWaiter = null;
    }
  }
}

/**
 * The offer as the server is sent it: each sending section's msid names the
 * track by the cid it was announced with (by mid). Firefox writes an id of its
 * own there, not the track's id, and the server matches media to announced
 * tracks by it (as Twilio's SDK rewrites it too).
 */
export function withAnnouncedIds(sdp: string, cidByMid: ReadonlyMap<string, string>): string {
  if (cidByMid.size === 0) return sdp;
  return sdp
    .split(/(?=\r\nm=)/)
    .map((section) => {
      const cid = cidByMid.get(/\r\na=mid:(\S+)/.exec(section)?.[1] ?? '');
      if (!cid) return section;
      return section
        .replace(/(\r\na=msid:\S+ )\S+/g, `$1${cid}`)
        .replace(/(\r\na=ssrc:\d+ msid:\S+ )\S+/g, `$1${cid}`);
    })
    .join('');
}

/** Layers from low to full, with bitrates that suit each size at 30 fps. */
export function simulcastLayers(s: MediaTrackSettings): LayerInfo[] {
  const w = s.width ?? 1280;
  const h = s.height ?? 720;
  return [
    { rid: 'q', width: Math.round(w / 4), height: Math.round(h / 4), maxBitrate: 150_000 },
    { rid: 'h', width: Math.round(w / 2), height: Math.round(h / 2), maxBitrate: 500_000 },
    { rid: 'f', width: w, height: h, maxBitrate: 1_500_000 },
  ];
}

/**
 * Which encodings a sender keeps on for a track demand: all off when nobody
 * receives the track, else those whose layer (rid q/h/f) is wanted.
 */
export function demandedEncodings(encodings: RTCRtpEncodingParameters[], active: boolean, layers?: boolean[]): boolean[] {
  const rids = ['q', 'h', 'f'];
  return encodings.map((enc) => {
    const i = enc.rid ? rids.indexOf(enc.rid) : -1;
    return active && (i < 0 || !layers || layers[i] !== false);
  });
}

// Puts mime first in the transceiver's codec list (where the browser supports
// setCodecPreferences and the codec); the answerer then picks it.
function preferCodec(t: RTCRtpTransceiver, kind: string, mime: string): void {
  const caps = globalThis.RTCRtpSender?.getCapabilities?.(kind)?.codecs;
  if (!caps || typeof t.setCodecPreferences !== 'function') return;
  const want = mime.toLowerCase();
  const first = caps.filter((c) => c.mimeType.toLowerCase() === want);
  if (first.length === 0) return;
  try {
    t.setCodecPreferences([...first, ...caps.filter((c) => c.mimeType.toLowerCase() !== want)]);
  } catch (err) {
    console.warn('petrel: codec preference refused', err);
  }
}

/** A local publication as the demand and simulcast logic see it. */
export interface DemandTarget {
  demand?: { active: boolean; layers?: boolean[] };
  readonly demandQueue: { run<T>(task: () => Promise<T>): Promise<T> };
  demandWaiters: (() => void)[];
  readonly transceiver: RTCRtpTransceiver;
}

/**
 * Nobody needs some of a track's encodings (or the whole track): stop encoding
 * them, which saves CPU and uplink; re-enabled encodings start with a keyframe.
 * Demands apply one at a time per sender, each time the latest one: a
 * setParameters still in flight makes the next getParameters stale, and Chrome
 * then rejects the update (the encoder would stay off).
 */
export async function applyDemand(pub: DemandTarget, active: boolean, layers?: boolean[]): Promise<void> {
  pub.demand = { active, layers };
  if (active) for (const w of pub.demandWaiters.splice(0)) w();
  await pub.demandQueue.run(async () => {
    const sender = pub.transceiver.sender;
    const want = pub.demand;
    const params = sender.getParameters();
    if (!want || !params.encodings?.length) return;
    const on = demandedEncodings(params.encodings, want.active, want.layers);
    params.encodings.forEach((enc, i) => (enc.active = on[i]));
    try {
      await sender.setParameters(params);
    } catch (err) {
      console.warn('petrel: could not apply track demand', err);
    }
  });
}

// Switching a camera to simulcast: how long to wait for the server to ask for the
// new publication's media, then how long both stay up so that viewers decode the
// new one before the old one goes.
const SIMULCAST_SWITCH_WAIT_MS = 8_000;
const SIMULCAST_OVERLAP_MS = 1_500;

/** What republishing a camera needs from the room. */
export interface Republisher<P extends DemandTarget & { sid: string }> {
  publishTrack(track: MediaStreamTrack, opts: { source: TrackSource; name: string; simulcast: boolean }): Promise<P>;
  unpublishTrack(sid: string): Promise<void>;
  readonly localTracks: ReadonlyMap<string, P>;
}

/**
 * Republishes a single-layer camera with simulcast (the room grew past two).
 * Chrome cannot add encodings to a sender, hence a new publication of a clone of
 * the track. Make before break: the old one keeps flowing until the server asks
 * for the new one's media and a moment more for the viewers' first keyframe.
 */
export async function republishSimulcast<P extends DemandTarget & { sid: string }>(
  room: Republisher<P>,
  old: P & { track: MediaStreamTrack; source: TrackSource; info: { name?: string } },
): Promise<void> {
  const track = old.track.clone();
  let next: P;
  try {
    next = await room.publishTrack(track, { source: old.source, name: old.info.name ?? '', simulcast: true });
  } catch (err) {
    track.stop();
    throw err;
  }
  await new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, SIMULCAST_SWITCH_WAIT_MS);
    next.demandWaiters.push(() => {
      clearTimeout(timer);
      resolve();
    });
    if (next.demand?.active) resolve();
  });
  await new Promise((r) => setTimeout(r, SIMULCAST_OVERLAP_MS));
  if (room.localTracks.get(old.sid) !== old || room.localTracks.get(next.sid) !== next) return;
  await room.unpublishTrack(old.sid);
  console.info(`petrel: camera now simulcast (${old.sid} -> ${next.sid})`);
}
