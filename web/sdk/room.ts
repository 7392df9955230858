// Room: one participant's session in a Petrel room (protocol v1): membership (who
// is there, what they publish; members.ts keeps the books) and the public API.
// The connection side is RoomConnection (connection.ts), which wires the
// modules: session.ts (signaling, with the publisher.ts and subscriber.ts
// transports), p2p.ts (the direct 1:1 mode), move.ts (moves to another node)
// and reconnect.ts (ICE restarts, resuming).
import { svcMime, SVC_MODE, type SvcCodec } from './svc.js';
import { encodeData } from './data.js';
import { type ClientMessage, type RoomRecording, type ServerMessage, FATAL_CODES, PetrelError } from './protocol.js';
import { clusterNodes, placeParticipant, tokenRoom } from './cluster.js';
import type { StatsSummary } from './stats.js';
import { E2EE } from './e2ee.js';
import { VideoObserver } from './observe.js';
import type { P2PSignal } from './p2p.js';
import { applyDemand, republishSimulcast, simulcastLayers } from './publisher.js';
import { RoomConnection, wsUrl } from './connection.js';
import {
  type ConnectOptions,
  type PublishOptions,
  type SendDataOptions,
  type TrackSettings,
  LocalTrackPublication,
} from './roomtypes.js';

export * from './roomtypes.js';
export { gathered } from './p2p.js';
export { wsUrl };
export type { ClientMessage };

const textEncoder = new TextEncoder();

export class Room extends RoomConnection {
  dominantSpeaker?: string;
  // Local track sids being republished with simulcast.
  private upgrading = new Set<string>();

  /** The end-to-end encryption of this room (ConnectOptions.e2ee): setKey, ratchetKey, stats. */
  get e2ee(): E2EE | null {
    return this.crypto;
  }

  /** The publisher peer connection (client offers), for diagnostics and tests. */
  get publisherPc(): RTCPeerConnection | null {
    return this.session.publisher?.pc ?? null;
  }
  /** The subscriber peer connection (server offers), for diagnostics and tests. */
  get subscriberPc(): RTCPeerConnection | null {
    return this.session.subscriber?.pc ?? null;
  }
  /** The direct peer connection of a 1:1 call, while one exists. */
  get directPc(): RTCPeerConnection | null {
    return this.p2p.pc;
  }
  /** The ICE configuration of this room's connections (the server's TURN included), for other peer connections. */
  get rtcConfiguration(): RTCConfiguration {
    return this.rtcConfig();
  }

  /** Sends `data` to participant `toSid` as a relay message (signaling of a direct connection). */
  async relay(toSid: string, data: unknown): Promise<void> {
    await this.request('relay', { type: 'relay', to: toSid, data });
  }

  /**
   * Joins the room. `url` is the server's base (`https://host`, `wss://host`) or
   * the full `/v1/rtc` WebSocket URL. Resolves once joined and the publisher
   * connection is negotiated; media flows as ICE completes.
   */
  async connect(url: string, token: string, opts: ConnectOptions = {}): Promise<void> {
    if (this.state !== 'disconnected') throw new Error(`connect: room is ${this.state}`);
    this.url = wsUrl(url);
    if (opts.cluster) {
      this.clusterNodes = (await clusterNodes(url)) ?? [];
      const placed = this.clusterNodes.length ? await placeParticipant(url, tokenRoom(token), [], token) : null;
      if (placed) {
        this.url = wsUrl(placed.ws);
        this.clusterNode = placed.node;
      }
    }
    this.token = token;
    this.opts = opts;
    this.setState('connecting');
    try {
      if (opts.e2ee) {
        this.crypto = new E2EE(opts.e2ee);
        this.crypto.onState = (rid, state) => this.onE2EEState(rid, state);
        // Before joining: the server's first offer must find the connections made.
        await this.crypto.start();
      }
      const joined = await this.session.join(this.url, this.joinMessage());
      // The server decodes a mixed room's audio: encrypted audio would be
      // noise in everyone's mix.
      if (this.crypto && joined.room.audioMix) {
        this.session.leave();
        throw new PetrelError('e2ee_unavailable', "the server mixes this room's audio, so it cannot be end-to-end encrypted: join without a passphrase");
      }
      await this.startSession(joined);
    } catch (err) {
      this.closeCrypto();
      this.teardown();
      this.setState('disconnected');
      throw err;
    }
    this.setState('connected');
    this.startQualityTimer();
    this.p2p.evaluate();
    window.addEventListener('online', this.onOnline);
    window.addEventListener('pagehide', this.onPageHide);
  }

  /** Leaves the room, stops local tracks and closes everything. */
  async disconnect(): Promise<void> {
    if (this.state === 'disconnected') return;
    this.session.leave();
    this.finish('client_leave');
  }

  async publishCamera(
    opts: { resolution?: MediaTrackConstraints; simulcast?: boolean; svc?: SvcCodec } = {},
  ): Promise<LocalTrackPublication> {
    const stream = await navigator.mediaDevices.getUserMedia({ video: opts.resolution ?? { width: 1280, height: 720 } });
    return this.publishTrack(stream.getVideoTracks()[0], { source: 'camera', simulcast: opts.simulcast, svc: opts.svc });
  }

  async publishMicrophone(constraints: MediaTrackConstraints | true = true): Promise<LocalTrackPublication> {
    const stream = await navigator.mediaDevices.getUserMedia({ audio: constraints });
    return this.publishTrack(stream.getAudioTracks()[0], { source: 'microphone' });
  }

  /** Shares the screen; with `audio`, also the tab/system audio when offered. */
  async publishScreen(opts: { audio?: boolean } = {}): Promise<LocalTrackPublication[]> {
    const stream = await navigator.mediaDevices.getDisplayMedia({ video: true, audio: opts.audio ?? false });
    const pubs: LocalTrackPublication[] = [];
    for (const track of stream.getTracks()) {
      pubs.push(await this.publishTrack(track, { source: track.kind === 'video' ? 'screen' : 'screen_audio' }));
    }
    return pubs;
  }

  async publishTrack(track: MediaStreamTrack, opts: PublishOptions = {}): Promise<LocalTrackPublication> {
    const transport = this.session.publisher;
    if (!transport) throw new Error('publishTrack: not connected');
    if (this.crypto && opts.codec && /h26[45]/i.test(opts.codec)) {
      throw new Error('publishTrack: H.264 and H.265 cannot be end-to-end encrypted (their NAL headers would be sealed)');
    }
    const svc = track.kind === 'video' && opts.svc ? svcMime(opts.svc) : undefined;
    const simulcast = !!svc || (opts.simulcast ?? this.participants.size + 1 > 2);
    const layers = simulcast && track.kind === 'video' ? simulcastLayers(track.getSettings()) : undefined;
    const { info, transceiver } = await transport.publish(track, {
      source: opts.source ?? 'unknown',
      name: opts.name ?? track.label,
      layers,
      // SVC: the layers (sizes) announced are the spatial layers of the one encoding.
      sendEncodings: svc
        ? [{ scalabilityMode: SVC_MODE, maxBitrate: 2_000_000 } as RTCRtpEncodingParameters]
        : layers?.map((l) => ({ rid: l.rid, maxBitrate: l.maxBitrate, scaleResolutionDownBy: l.rid === 'q' ? 4 : l.rid === 'h' ? 2 : 1 })),
      codec: svc ?? opts.codec ?? (this.crypto && track.kind === 'video' ? 'video/VP8' : undefined),
      // VP9 names its layers in its payload descriptor; AV1 only in the descriptor extension.
      dependencyDescriptor: !!svc && opts.svc === 'av1',
    });
    const pub = new LocalTrackPublication(info, track, transceiver, !!layers, opts.simulcast === undefined);
    this.localTracks.set(info.sid, pub);
    // The browser's "stop sharing" button ends the track: take it out of the room.
    track.addEventListener('ended', () => void this.unpublishTrack(info.sid).catch(() => {}));
    try {
      await transport.negotiate();
    } catch (err) {
      await this.unpublishTrack(info.sid, { stop: false }).catch(() => {});
      throw err;
    }
    this.emit('localTrackPublished', pub);
    void this.p2p.syncSenders();
    return pub;
  }

  async unpublishTrack(trackSid: string, opts: { stop?: boolean } = {}): Promise<void> {
    const pub = this.localTracks.get(trackSid);
    if (!pub) return;
    this.localTracks.delete(trackSid);
    if (opts.stop ?? true) pub.track.stop();
    this.session.publisher?.remove(pub.track, pub.transceiver.sender);
    this.emit('localTrackUnpublished', pub);
    void this.p2p.syncSenders();
    if (!this.session.open) return;
    await this.session.request({ type: 'unpublishTrack', trackSid });
    await this.session.publisher?.negotiate();
  }

  /** Mutes a local track: it sends silence / black frames and the room is told. */
  async muteTrack(trackSid: string, muted: boolean): Promise<void> {
    const pub = this.localTracks.get(trackSid);
    if (!pub) throw new Error(`muteTrack: no local track ${trackSid}`);
    pub.track.enabled = !muted;
    pub.info = { ...pub.info, muted };
    if (this.session.hasSignal) await this.session.request({ type: 'muteTrack', trackSid, muted });
  }

  /** Starts or stops receiving a remote track (with autoSubscribe off, or to save bandwidth). */
  async subscribe(trackSid: string, subscribe: boolean): Promise<void> {
    await this.request('subscribe', { type: 'subscribe', trackSids: [trackSid], subscribe });
  }

  /** Tells the server how a subscribed video is shown, so it forwards no more than needed. */
  async updateTrackSettings(trackSid: string, settings: TrackSettings): Promise<void> {
    await this.request('updateTrackSettings', { type: 'updateTrackSettings', trackSid, ...settings });
  }

  /**
   * Adaptive subscription: reports the size `el` is shown at (debounced, on every
   * resize) so the server sends the smallest layer that looks sharp there, and
   * pauses the video while the page is hidden or the element is off-screen.
   * Returns a function that stops observing.
   */
  observeVideo(trackSid: string, el: HTMLElement): () => void {
    this.unobserveVideo(el);
    const o = new VideoObserver(el, (settings) => {
      if (!this.session.open) return;
      this.updateTrackSettings(trackSid, settings).catch(() => {});
    });
    this.videoObservers.set(el, o);
    return () => this.unobserveVideo(el);
  }

  /** Stops the adaptive subscription reports for `el`. */
  unobserveVideo(el: HTMLElement): void {
    this.videoObservers.get(el)?.stop();
    this.videoObservers.delete(el);
  }

  /** Receive video from at most `n` other participants, most recent speakers first (0: all). */
  async setLastN(n: number): Promise<void> {
    await this.request('setLastN', { type: 'setLastN', n });
  }

  /**
   * Receive at most `bitrate` bit/s (0: no cap): the server lowers layers and
   * frame rates to fit, as it does when the network is the limit.
   */
  async setMaxBitrate(bitrate: number): Promise<void> {
    await this.request('setMaxBitrate', { type: 'setMaxBitrate', bitrate });
  }

  /** Always receive these participants' video, whatever Last-N says (replaces earlier pins). */
  async pin(participantSids: string[]): Promise<void> {
    await this.request('pin', { type: 'pin', participantSids });
  }

  /**
   * Starts recording this room (every published track); the token needs the
   * `record` grant. A room already being recorded answers its recording.
   */
  async startRecording(): Promise<RoomRecording> {
    const r = await this.request('startRecording', { type: 'startRecording' });
    return (r as unknown as { recording: RoomRecording }).recording;
  }

  /** Stops this room's recording (the `record` grant). */
  async stopRecording(): Promise<RoomRecording> {
    const r = await this.request('stopRecording', { type: 'stopRecording' });
    return (r as unknown as { recording: RoomRecording }).recording;
  }

  async updateMetadata(update: { metadata?: string; name?: string }): Promise<void> {
    await this.request('updateMetadata', { type: 'updateMetadata', ...update });
  }

  /** Sends a room data message over the publisher connection's data channels. */
  async sendData(payload: string | Uint8Array, opts: SendDataOptions = {}): Promise<void> {
    const reliable = opts.reliable ?? true;
    const transport = this.session.publisher;
    const dc = reliable ? transport?.reliable : transport?.lossy;
    if (!dc) throw new Error('sendData: not connected');
    if (dc.readyState !== 'open') await waitOpen(dc);
    const text = typeof payload === 'string';
    const bytes = text ? textEncoder.encode(payload) : payload;
    dc.send(encodeData({ to: opts.to?.length ? opts.to : undefined, topic: opts.topic, text }, bytes));
  }

  /**
   * ICE-restarts both peer connections without touching the socket, e.g. after a
   * network change. The room does this by itself on ICE failure and when the
   * browser comes back online.
   */
  restartIce(): void {
    this.session.restartIce('publisher');
    this.session.restartIce('subscriber');
  }

  /**
   * Drops the signaling socket as a network failure would; the room then resumes.
   * With `fullReconnect` it also forgets its resume token, as after a long outage,
   * so it must join again as a new participant and republish.
   */
  simulateSignalLoss(opts: { fullReconnect?: boolean } = {}): void {
    if (opts.fullReconnect) this.resumeToken = '';
    this.session.drop();
  }

  /** A summary of both peer connections' statistics; bitrates are since the last call. */
  getStats(): Promise<StatsSummary> {
    const { publisher, subscriber } = this.session;
    const localSid = this.localParticipant?.sid ?? '';
    return this.stats.collect(publisher?.pc ?? null, subscriber?.pc ?? null, (direction, mid, via) => {
      if (mid === undefined) return undefined;
      // The direct connection carries the camera and microphone of each side.
      if (via === 'direct') return this.p2p.statsTarget(direction, mid, localSid);
      if (direction === 'inbound') {
        const m = subscriber?.mids.get(mid);
        return m && { trackSid: m.trackId, participantSid: m.streamId };
      }
      for (const pub of this.localTracks.values()) if (pub.transceiver.mid === mid) return { trackSid: pub.sid, participantSid: localSid };
      return undefined;
    }, this.p2p.pc);
  }

  // ---- server messages ----------------------------------------------------------

  protected onMessage(msg: ServerMessage): void {
    switch (msg.type) {
      case 'participantJoined':
      case 'participantUpdated':
        if (msg.participant.sid !== this.localParticipant?.sid) this.members.upsert(msg.participant);
        else this.localParticipant = msg.participant;
        if (msg.type === 'participantJoined') {
          this.p2p.evaluate();
          this.growSimulcast();
        }
        break;
      case 'participantLeft':
        this.members.left(msg.participantSid, msg.reason);
        this.p2p.evaluate();
        break;
      case 'relay':
        void this.p2p.onRelay(msg.from, msg.data as P2PSignal).catch((err) => console.warn('petrel: p2p signaling failed', err));
        this.emit('relayReceived', msg.from, msg.data);
        break;
      case 'trackPublished':
        this.members.trackPublished(msg.participantSid, msg.track);
        break;
      case 'trackUnpublished':
        this.members.trackUnpublished(msg.participantSid, msg.trackSid);
        break;
      case 'trackMuted': {
        const local = this.localTracks.get(msg.trackSid);
        if (!local) this.members.trackMuted(msg.participantSid, msg.trackSid, msg.muted);
        else {
          // Muted by an admin: follow it locally so the page shows the truth.
          local.info = { ...local.info, muted: msg.muted };
          local.track.enabled = !msg.muted;
        }
        break;
      }
      case 'dominantSpeaker':
        this.dominantSpeaker = msg.participantSid;
        this.emit('dominantSpeakerChanged', msg.participantSid, this.participants.get(msg.participantSid));
        break;
      case 'trackDemand': {
        const pub = this.localTracks.get(msg.trackSid);
        if (pub) void applyDemand(pub, msg.active, msg.layers);
        break;
      }
      case 'trackSubscribed':
        this.members.trackSubscribed(msg.participantSid, msg.trackSid);
        break;
      case 'trackUnsubscribed':
        this.members.trackUnsubscribed(msg.participantSid, msg.trackSid);
        break;
      case 'error':
        console.warn(`petrel: server error ${msg.code}: ${msg.message}`);
        if (FATAL_CODES.has(msg.code)) this.finish(msg.code);
        break;
      case 'leave':
        this.finish(msg.reason || 'leave');
        break;
      case 'reconnect':
        this.moveTo(msg.url, msg.node, msg.reason ?? 'reconnect');
        break;
      case 'move':
        this.moveRoom(msg.room, msg.token);
        break;
      default:
        break;
    }
  }

  // The room has grown past two: cameras published as one encoding (by the SDK's
  // choice, not the caller's) are republished with simulcast, so that each viewer
  // can get the layer it needs; the app swaps tiles to the new track on its first frame.
  private growSimulcast(): void {
    if (this.participants.size + 1 <= 2 || this.state !== 'connected') return;
    for (const pub of [...this.localTracks.values()]) {
      if (pub.kind !== 'video' || pub.source !== 'camera' || pub.simulcast || !pub.autoSimulcast) continue;
      if (this.upgrading.has(pub.sid) || pub.track.readyState !== 'live') continue;
      this.upgrading.add(pub.sid);
      republishSimulcast(this, pub)
        .catch((err) => console.warn('petrel: could not switch the camera to simulcast', err))
        .finally(() => this.upgrading.delete(pub.sid));
    }
  }

}

function waitOpen(dc: RTCDataChannel, timeoutMs = 10_000): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`sendData: channel ${dc.label} not open`)), timeoutMs);
    dc.addEventListener('open', () => {
      clearTimeout(timer);
      resolve();
    });
    dc.addEventListener('close', () => {
      clearTimeout(timer);
      reject(new Error(`sendData: channel ${dc.label} closed`));
    });
  });
}
