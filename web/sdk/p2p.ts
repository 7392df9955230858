// The direct mode of a 1:1 call: with exactly two participants, camera and
// microphone travel on a peer-to-peer connection while the SFU connections stay
// up and idle. Signaling is two relay messages (offer, answer) through the server.
import type { TrackKind } from './protocol.js';
import type { LocalTrackPublication, MediaPath, RemoteParticipant, RemoteTrackPublication } from './roomtypes.js';

// P2P hysteresis: a 1:1 room must stay 1:1 this long before going direct; a
// disconnected direct path gets this long to recover; after a fallback the next
// attempt waits longer, so a flaky path does not flip media back and forth.
export const P2P_SETTLE_MS = 2_000;
const P2P_DISCONNECTED_GRACE_MS = 3_000;
export const P2P_CONNECT_TIMEOUT_MS = 10_000;
export const P2P_RETRY_MS = 10_000;
const P2P_RETRY_MAX_MS = 120_000;

/** A direct-mode relay message between the two participants. */
export interface P2PSignal {
  p2p: 'offer' | 'answer' | 'bye';
  session: string;
  sdp?: string;
}

// The direct connection of a 1:1 call. The lower sid offers (no glare); one audio
// and one video transceiver, both sendrecv, each side's camera and microphone.
interface DirectLink {
  peerSid: string;
  session: string;
  pc: RTCPeerConnection;
  audio?: RTCRtpTransceiver;
  video?: RTCRtpTransceiver;
  remote: Partial<Record<TrackKind, MediaStreamTrack>>;
  active: boolean; // media moved onto it
  timer?: ReturnType<typeof setTimeout>;
}

/** What the direct mode needs from the room it belongs to. */
export interface DirectHost {
  /** Direct mode is on for this room (ConnectOptions.p2p, and no end-to-end encryption). */
  allowed(): boolean;
  /** The room is connected. */
  connected(): boolean;
  localSid(): string | undefined;
  readonly participants: ReadonlyMap<string, RemoteParticipant>;
  readonly localTracks: ReadonlyMap<string, LocalTrackPublication>;
  rtcConfig(): RTCConfiguration;
  relay(to: string, data: P2PSignal): void;
  /** Media moved to `path`: the room re-shows tracks and tells the page. */
  pathChanged(path: MediaPath, reason: string): void;
}

export class DirectMode {
  private link: DirectLink | null = null;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private notBefore = 0;
  private failures = 0;

  constructor(
    private host: DirectHost,
    private newPc: (config: RTCConfiguration) => RTCPeerConnection = (c) => new RTCPeerConnection(c),
  ) {}

  /** The direct peer connection while one exists. */
  get pc(): RTCPeerConnection | null {
    return this.link?.pc ?? null;
  }

  // The one other participant when the room is exactly two, else undefined.
  private onlyPeer(): RemoteParticipant | undefined {
    const ps = this.host.participants;
    return ps.size === 1 ? [...ps.values()][0] : undefined;
  }

  // Called whenever the room changes: a third participant ends the direct call at
  // once; a room that is (again) 1:1 goes direct after it has settled.
  evaluate(): void {
    clearTimeout(this.timer);
    const local = this.host.localSid();
    if (!this.host.allowed() || !this.host.connected() || !local) return;
    const peer = this.onlyPeer();
    if (this.link && this.link.peerSid !== peer?.sid) this.leave(peer ? 'peer changed' : 'room is not 1:1', false);
    if (!peer || this.link) return;
    if (local > peer.sid) return; // the other side offers
    const wait = Math.max(P2P_SETTLE_MS, this.notBefore - Date.now());
    this.timer = setTimeout(() => {
      if (this.onlyPeer() === peer && !this.link && this.host.connected()) {
        this.offer(peer.sid).catch((err) => {
          console.warn('petrel: p2p offer failed', err);
          this.leave('offer failed', true);
          this.evaluate();
        });
      }
    }, wait);
  }

  private newLink(peerSid: string, session: string): DirectLink {
    const pc = this.newPc(this.host.rtcConfig());
    const link: DirectLink = { peerSid, session, pc, remote: {}, active: false };
    pc.ontrack = (ev) => {
      link.remote[ev.track.kind as TrackKind] = ev.track;
    };
    pc.onconnectionstatechange = () => this.onState(link);
    this.link = link;
    // A path that never connects (the other side is no browser, UDP blocked) is given up.
    link.timer = setTimeout(() => {
      if (this.link === link && !link.active) {
        this.leave('direct path did not connect', true);
        this.evaluate();
      }
    }, P2P_CONNECT_TIMEOUT_MS);
    return link;
  }

  private async offer(peerSid: string): Promise<void> {
    const link = this.newLink(peerSid, Math.random().toString(36).slice(2));
    link.audio = link.pc.addTransceiver('audio', { direction: 'sendrecv' });
    link.video = link.pc.addTransceiver('video', { direction: 'sendrecv' });
    await link.pc.setLocalDescription(await link.pc.createOffer());
    await gathered(link.pc);
    if (this.link !== link) return;
    this.host.relay(peerSid, { p2p: 'offer', session: link.session, sdp: link.pc.localDescription?.sdp });
  }

  /** A relay message from `from`; anything that is not direct-mode signaling is ignored. */
  async onRelay(from: string, data: P2PSignal): Promise<void> {
    if (!data || typeof data !== 'object' || !('p2p' in data)) return;
    const link = this.link;
    switch (data.p2p) {
      case 'offer': {
        if (!this.host.allowed() || this.onlyPeer()?.sid !== from || !data.sdp) {
          this.host.relay(from, { p2p: 'bye', session: data.session });
          return;
        }
        if (link) this.leave('new offer', false);
        const l = this.newLink(from, data.session);
        await l.pc.setRemoteDescription({ type: 'offer', sdp: data.sdp });
        for (const t of l.pc.getTransceivers()) {
          const kind = t.receiver.track.kind as TrackKind;
          t.direction = 'sendrecv';
          if (kind === 'audio') l.audio ??= t;
          else l.video ??= t;
        }
        await l.pc.setLocalDescription(await l.pc.createAnswer());
        await gathered(l.pc);
        if (this.link !== l) return;
        this.host.relay(from, { p2p: 'answer', session: l.session, sdp: l.pc.localDescription?.sdp });
        return;
      }
      case 'answer':
        if (link && link.peerSid === from && link.session === data.session && data.sdp) {
          await link.pc.setRemoteDescription({ type: 'answer', sdp: data.sdp });
        }
        return;
      case 'bye':
        // The peer declined (p2p off) or its direct path failed: try again later.
        if (link && link.peerSid === from && link.session === data.session) {
          this.leave('peer ended p2p', true, false);
          this.evaluate();
        }
        return;
    }
  }

  private onState(link: DirectLink): void {
    if (this.link !== link) return;
    const state = link.pc.connectionState;
    if (state === 'connected') {
      clearTimeout(link.timer);
      if (!link.active) void this.enter(link);
    } else if (state === 'disconnected') {
      clearTimeout(link.timer);
      link.timer = setTimeout(() => {
        if (this.link === link && link.pc.connectionState !== 'connected') {
          this.leave('direct path lost', true);
          this.evaluate();
        }
      }, P2P_DISCONNECTED_GRACE_MS);
    } else if (state === 'failed' || state === 'closed') {
      this.leave(`direct path ${state}`, true);
      this.evaluate();
    }
  }

  private async enter(link: DirectLink): Promise<void> {
    link.active = true;
    this.failures = 0;
    await this.syncSenders();
    if (this.link !== link) return;
    this.host.pathChanged('p2p', 'direct connection up');
  }

  /**
   * Puts camera and microphone on the direct connection's senders and takes them
   * off the SFU's (the SFU connection stays up, idle), or the reverse when no
   * direct link is active. Called on every change of path or local tracks.
   */
  async syncSenders(): Promise<void> {
    const link = this.link?.active ? this.link : null;
    const jobs: Promise<void>[] = [];
    for (const kind of ['audio', 'video'] as const) {
      const local = localDirectPublication(this.host.localTracks.values(), kind);
      const t = link?.[kind];
      if (link && t) {
        if (t.sender.track !== (local?.track ?? null)) jobs.push(t.sender.replaceTrack(local?.track ?? null));
        if (local && local.transceiver.sender.track) jobs.push(local.transceiver.sender.replaceTrack(null));
      } else if (local && local.transceiver.sender.track !== local.track && local.track.readyState === 'live') {
        jobs.push(local.transceiver.sender.replaceTrack(local.track));
      }
    }
    const results = await Promise.allSettled(jobs);
    for (const r of results) if (r.status === 'rejected') console.warn('petrel: replaceTrack failed', r.reason);
  }

  /**
   * Back to the SFU: media first (the SFU senders get their tracks again), then the
   * tiles, then the direct connection goes. After a failure the next attempt waits,
   * longer each time (a peer without p2p, a path that keeps failing).
   */
  leave(reason: string, failed: boolean, tellPeer = true): void {
    const link = this.link;
    if (!link) return;
    clearTimeout(link.timer);
    this.link = null;
    if (failed) {
      this.notBefore = Date.now() + Math.min(P2P_RETRY_MS * 2 ** this.failures, P2P_RETRY_MAX_MS);
      this.failures++;
    }
    if (tellPeer && this.host.participants.has(link.peerSid)) this.host.relay(link.peerSid, { p2p: 'bye', session: link.session });
    void this.syncSenders().finally(() => link.pc.close());
    this.host.pathChanged('sfu', reason);
  }

  /** Closes the direct connection at once, without telling anyone (the room closes). */
  close(): void {
    clearTimeout(this.timer);
    if (!this.link) return;
    clearTimeout(this.link.timer);
    this.link.pc.close();
    this.link = null;
  }

  /** The track that shows `pub` of `p` while media is direct, else undefined (the SFU's). */
  remoteTrack(p: RemoteParticipant, pub: RemoteTrackPublication): MediaStreamTrack | undefined {
    const d = this.link;
    return d?.active && d.peerSid === p.sid && pub === directPublication(p, pub.kind) ? d.remote[pub.kind] : undefined;
  }

  /** The publication a direct-connection stats entry (by mid) is about. */
  statsTarget(direction: 'inbound' | 'outbound', mid: string, localSid: string): { trackSid: string; participantSid: string } | undefined {
    const link = this.link;
    const t = link?.pc.getTransceivers().find((x) => x.mid === mid);
    if (!link || !t) return undefined;
    const kind = t.receiver.track.kind as TrackKind;
    if (direction === 'outbound') {
      const local = localDirectPublication(this.host.localTracks.values(), kind);
      return local && { trackSid: local.sid, participantSid: localSid };
    }
    const peer = this.host.participants.get(link.peerSid);
    const remote = peer && directPublication(peer, kind);
    return remote && { trackSid: remote.sid, participantSid: peer.sid };
  }
}

// The local publication that travels on the direct connection for this kind:
// the camera or microphone (screen shares stay on the SFU).
function localDirectPublication(tracks: Iterable<LocalTrackPublication>, kind: TrackKind): LocalTrackPublication | undefined {
  return [...tracks].find((t) => t.kind === kind && t.source !== 'screen' && t.source !== 'screen_audio');
}

function directPublication(p: RemoteParticipant, kind: TrackKind): RemoteTrackPublication | undefined {
  return [...p.tracks.values()].find((t) => t.kind === kind && t.source !== 'screen' && t.source !== 'screen_audio');
}

// Waits for ICE gathering to finish (bounded): the direct connection's offer and
// answer carry all candidates, so its signaling is two relay messages.
export function gathered(pc: RTCPeerConnection, timeoutMs = 3_000): Promise<void> {
  if (pc.iceGatheringState === 'complete') return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, timeoutMs);
    pc.addEventListener('icegatheringstatechange', () => {
      if (pc.iceGatheringState === 'complete') {
        clearTimeout(timer);
        resolve();
      }
    });
  });
}
