// Room: one participant's session in a Petrel room (protocol v1). It owns the
// signaling socket and the two peer connections, keeps the room state the server
// reports, and turns it into typed events.
import { CandidateBuffer, Serializer, TaskQueue } from './negotiation.js';
import { decodeData, encodeData } from './data.js';
import { Emitter } from './emitter.js';
import {
  type ClientMessage,
  type JoinedMessage,
  type LayerInfo,
  type VideoQuality,
  type ParticipantInfo,
  type PcTarget,
  type RoomInfo,
  type ServerMessage,
  type TrackInfo,
  type TrackKind,
  type TrackSource,
  FATAL_CODES,
  PROTOCOL_VERSION,
  PetrelError,
} from './protocol.js';
import { type MsidInfo, msidByMid } from './sdp.js';
import { SignalClient } from './signal.js';
import { type ConnectionQuality, type StatsSummary, StatsCollector } from './stats.js';

export interface ConnectOptions {
  name?: string;
  metadata?: string;
  /** Subscribe to every track published in the room (default true). */
  autoSubscribe?: boolean;
  /** 'relay' forces media through TURN (the server's embedded one by default). */
  iceTransportPolicy?: RTCIceTransportPolicy;
  /** Added to the ICE servers the server sends in `joined`. */
  iceServers?: RTCIceServer[];
  /** How long to try resuming after the socket drops (server keeps us 20 s). */
  reconnectWindowMs?: number;
  /** How often connection quality is measured (ms, default 2000). */
  qualityIntervalMs?: number;
}

export interface PublishOptions {
  source?: TrackSource;
  name?: string;
  /** Send three resolutions (full, 1/2, 1/4) so each subscriber gets what fits. Video only. */
  simulcast?: boolean;
}

export interface TrackSettings {
  /** The size the video is shown at: the server picks the smallest layer covering it. */
  width?: number;
  height?: number;
  quality?: VideoQuality;
  /** Stop forwarding while the video is not visible. */
  paused?: boolean;
}

export interface SendDataOptions {
  /** Reliable, ordered delivery (default) or unordered with no retransmissions. */
  reliable?: boolean;
  /** Identities to send to; everyone else in the room when absent. */
  to?: string[];
  topic?: string;
}

export interface DataMessage {
  payload: Uint8Array;
  /** The payload as text, when the sender sent a string. */
  text?: string;
  from?: string;
  fromSid?: string;
  topic?: string;
  reliable: boolean;
  participant?: RemoteParticipant;
}

export type ConnectionState = 'disconnected' | 'connecting' | 'connected' | 'reconnecting';

export class RemoteTrackPublication {
  /** The media, once subscribed and arrived on the subscriber connection. */
  track?: MediaStreamTrack;
  subscribed = false;
  constructor(
    public info: TrackInfo,
    readonly participantSid: string,
  ) {}
  get sid(): string {
    return this.info.sid;
  }
  get kind(): TrackKind {
    return this.info.kind;
  }
  get source(): TrackSource {
    return this.info.source;
  }
  get muted(): boolean {
    return this.info.muted;
  }
}

export class LocalTrackPublication {
  /** The latest trackDemand from the server: which encodings anyone receives. */
  demand?: { active: boolean; layers?: boolean[] };
  /** @internal serializes encoder parameter changes */
  readonly demandQueue = new TaskQueue();
  constructor(
    public info: TrackInfo,
    readonly track: MediaStreamTrack,
    readonly transceiver: RTCRtpTransceiver,
  ) {}
  get sid(): string {
    return this.info.sid;
  }
  get kind(): TrackKind {
    return this.info.kind;
  }
  get source(): TrackSource {
    return this.info.source;
  }
  get muted(): boolean {
    return this.info.muted;
  }
}

export class RemoteParticipant {
  readonly tracks = new Map<string, RemoteTrackPublication>();
  constructor(public info: ParticipantInfo) {}
  get sid(): string {
    return this.info.sid;
  }
  get identity(): string {
    return this.info.identity;
  }
  get name(): string {
    return this.info.name || this.info.identity;
  }
}

export interface RoomEvents {
  /** Also emitted, right after connect, for everyone already in the room. */
  participantJoined: (p: RemoteParticipant) => void;
  participantLeft: (p: RemoteParticipant, reason: string) => void;
  participantUpdated: (p: RemoteParticipant) => void;
  trackPublished: (pub: RemoteTrackPublication, p: RemoteParticipant) => void;
  trackUnpublished: (pub: RemoteTrackPublication, p: RemoteParticipant) => void;
  trackMuted: (pub: RemoteTrackPublication, p: RemoteParticipant, muted: boolean) => void;
  trackSubscribed: (track: MediaStreamTrack, pub: RemoteTrackPublication, p: RemoteParticipant | undefined) => void;
  trackUnsubscribed: (track: MediaStreamTrack, pub: RemoteTrackPublication, p: RemoteParticipant | undefined) => void;
  localTrackPublished: (pub: LocalTrackPublication) => void;
  localTrackUnpublished: (pub: LocalTrackPublication) => void;
  dataReceived: (msg: DataMessage) => void;
  /** The room's dominant speaker changed; `sid` may be our own participant sid. */
  dominantSpeakerChanged: (sid: string, p: RemoteParticipant | undefined) => void;
  connectionQuality: (quality: ConnectionQuality, stats: StatsSummary) => void;
  connectionStateChanged: (state: ConnectionState) => void;
  reconnecting: () => void;
  reconnected: () => void;
  disconnected: (reason: string) => void;
}

const textDecoder = new TextDecoder();
const textEncoder = new TextEncoder();
const ICE_DISCONNECTED_GRACE_MS = 5_000;

export class Room extends Emitter<RoomEvents> {
  state: ConnectionState = 'disconnected';
  room?: RoomInfo;
  localParticipant?: ParticipantInfo;
  readonly participants = new Map<string, RemoteParticipant>();
  readonly localTracks = new Map<string, LocalTrackPublication>();
  quality: ConnectionQuality = 'unknown';
  dominantSpeaker?: string;

  private url = '';
  private token = '';
  private opts: ConnectOptions = {};
  private signal: SignalClient | null = null;
  private resumeToken = '';
  private iceServers: RTCIceServer[] = [];
  private pub: RTCPeerConnection | null = null;
  private sub: RTCPeerConnection | null = null;
  private reliable: RTCDataChannel | null = null;
  private lossy: RTCDataChannel | null = null;
  private pubNegotiation = new Serializer((iceRestart) => this.publisherRound(iceRestart));
  private subQueue = new TaskQueue();
  private pubCandidates = new CandidateBuffer(() => this.pub);
  private subCandidates = new CandidateBuffer(() => this.sub);
  private answerWaiter: ((sdp: string) => void) | null = null;
  private subMids = new Map<string, MsidInfo>();
  // Tracks that arrived before the server told us who published them.
  private orphanTracks = new Map<string, MediaStreamTrack>();
  private localStream = new MediaStream();
  private stats = new StatsCollector();
  private qualityTimer: ReturnType<typeof setInterval> | null = null;
  private iceTimers: Partial<Record<PcTarget, ReturnType<typeof setTimeout>>> = {};

  /** The publisher peer connection (client offers), for diagnostics and tests. */
  get publisherPc(): RTCPeerConnection | null {
    return this.pub;
  }
  /** The subscriber peer connection (server offers), for diagnostics and tests. */
  get subscriberPc(): RTCPeerConnection | null {
    return this.sub;
  }

  /**
   * Joins the room. `url` is the server's base (`https://host`, `wss://host`) or
   * the full `/v1/rtc` WebSocket URL. Resolves once joined and the publisher
   * connection is negotiated; media flows as ICE completes.
   */
  async connect(url: string, token: string, opts: ConnectOptions = {}): Promise<void> {
    if (this.state !== 'disconnected') throw new Error(`connect: room is ${this.state}`);
    this.url = wsUrl(url);
    this.token = token;
    this.opts = opts;
    this.setState('connecting');
    try {
      const joined = await this.openSignal();
      await this.startSession(joined);
    } catch (err) {
      this.teardown();
      this.setState('disconnected');
      throw err;
    }
    this.setState('connected');
    this.startQualityTimer();
    window.addEventListener('online', this.onOnline);
    window.addEventListener('pagehide', this.onPageHide);
  }

  // Closing the tab is leaving: tell the server now, so that the others do not
  // look at a frozen tile for the whole resume window.
  private onPageHide = (): void => {
    void this.disconnect();
  };

  // Back online after an outage: the old ICE paths are likely gone.
  private onOnline = (): void => {
    if (this.state === 'connected') this.restartIce();
  };

  /** Leaves the room, stops local tracks and closes everything. */
  async disconnect(): Promise<void> {
    if (this.state === 'disconnected') return;
    try {
      this.signal?.send({ type: 'leave' });
    } catch {
      /* already gone */
    }
    this.finish('client_leave');
  }

  async publishCamera(
    opts: { resolution?: MediaTrackConstraints; simulcast?: boolean } = {},
  ): Promise<LocalTrackPublication> {
    const stream = await navigator.mediaDevices.getUserMedia({ video: opts.resolution ?? { width: 1280, height: 720 } });
    return this.publishTrack(stream.getVideoTracks()[0], { source: 'camera', simulcast: opts.simulcast });
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
    const pc = this.pub;
    if (!pc || !this.signal) throw new Error('publishTrack: not connected');
    const settings = track.getSettings();
    const layers = opts.simulcast && track.kind === 'video' ? simulcastLayers(settings) : undefined;
    // The server learns the track first and matches it to the SDP by msid (= track.id).
    const reply = await this.signal.request({
      type: 'publishTrack',
      cid: track.id,
      kind: track.kind as TrackKind,
      source: opts.source ?? 'unknown',
      name: opts.name ?? track.label,
      muted: !track.enabled,
      width: settings.width,
      height: settings.height,
      layers,
    });
    const info = (reply as { track?: TrackInfo }).track;
    if (!info) throw new Error('publishTrack: server reply has no track');
    this.localStream.addTrack(track);
    const transceiver = pc.addTransceiver(track, {
      direction: 'sendonly',
      streams: [this.localStream],
      sendEncodings: layers?.map((l) => ({
        rid: l.rid,
        maxBitrate: l.maxBitrate,
        scaleResolutionDownBy: l.rid === 'q' ? 4 : l.rid === 'h' ? 2 : 1,
      })),
    });
    const pub = new LocalTrackPublication(info, track, transceiver);
    this.localTracks.set(info.sid, pub);
    // The browser's "stop sharing" button ends the track: take it out of the room.
    track.addEventListener('ended', () => void this.unpublishTrack(info.sid).catch(() => {}));
    try {
      await this.pubNegotiation.negotiate();
    } catch (err) {
      await this.unpublishTrack(info.sid, { stop: false }).catch(() => {});
      throw err;
    }
    this.emit('localTrackPublished', pub);
    return pub;
  }

  async unpublishTrack(trackSid: string, opts: { stop?: boolean } = {}): Promise<void> {
    const pub = this.localTracks.get(trackSid);
    if (!pub) return;
    this.localTracks.delete(trackSid);
    this.localStream.removeTrack(pub.track);
    if (opts.stop ?? true) pub.track.stop();
    if (this.pub && this.pub.signalingState !== 'closed') {
      this.pub.removeTrack(pub.transceiver.sender);
    }
    this.emit('localTrackUnpublished', pub);
    if (!this.signal?.open) return;
    await this.signal.request({ type: 'unpublishTrack', trackSid });
    await this.pubNegotiation.negotiate();
  }

  /** Mutes a local track: it sends silence / black frames and the room is told. */
  async muteTrack(trackSid: string, muted: boolean): Promise<void> {
    const pub = this.localTracks.get(trackSid);
    if (!pub) throw new Error(`muteTrack: no local track ${trackSid}`);
    pub.track.enabled = !muted;
    pub.info = { ...pub.info, muted };
    await this.signal?.request({ type: 'muteTrack', trackSid, muted });
  }

  /** Starts or stops receiving a remote track (with autoSubscribe off, or to save bandwidth). */
  async subscribe(trackSid: string, subscribe: boolean): Promise<void> {
    if (!this.signal) throw new Error('subscribe: not connected');
    await this.signal.request({ type: 'subscribe', trackSids: [trackSid], subscribe });
  }

  /** Tells the server how a subscribed video is shown, so it forwards no more than needed. */
  async updateTrackSettings(trackSid: string, settings: TrackSettings): Promise<void> {
    if (!this.signal) throw new Error('updateTrackSettings: not connected');
    await this.signal.request({ type: 'updateTrackSettings', trackSid, ...settings });
  }

  /** Receive video from at most `n` other participants, most recent speakers first (0: all). */
  async setLastN(n: number): Promise<void> {
    if (!this.signal) throw new Error('setLastN: not connected');
    await this.signal.request({ type: 'setLastN', n });
  }

  /** Always receive these participants' video, whatever Last-N says (replaces earlier pins). */
  async pin(participantSids: string[]): Promise<void> {
    if (!this.signal) throw new Error('pin: not connected');
    await this.signal.request({ type: 'pin', participantSids });
  }

  async updateMetadata(update: { metadata?: string; name?: string }): Promise<void> {
    if (!this.signal) throw new Error('updateMetadata: not connected');
    await this.signal.request({ type: 'updateMetadata', ...update });
  }

  /** Sends a room data message over the publisher connection's data channels. */
  async sendData(payload: string | Uint8Array, opts: SendDataOptions = {}): Promise<void> {
    const reliable = opts.reliable ?? true;
    const dc = reliable ? this.reliable : this.lossy;
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
    this.restartIceOf('publisher');
    this.restartIceOf('subscriber');
  }

  /**
   * Drops the signaling socket as a network failure would; the room then resumes.
   * With `fullReconnect` it also forgets its resume token, as after a long outage,
   * so it must join again as a new participant and republish.
   */
  simulateSignalLoss(opts: { fullReconnect?: boolean } = {}): void {
    if (opts.fullReconnect) this.resumeToken = '';
    this.signal?.drop();
  }

  /** A summary of both peer connections' statistics; bitrates are since the last call. */
  getStats(): Promise<StatsSummary> {
    return this.stats.collect(this.pub, this.sub, (direction, mid) => {
      if (mid === undefined) return undefined;
      if (direction === 'inbound') {
        const m = this.subMids.get(mid);
        return m && { trackSid: m.trackId, participantSid: m.streamId };
      }
      for (const pub of this.localTracks.values()) {
        if (pub.transceiver.mid === mid) return { trackSid: pub.sid, participantSid: this.localParticipant?.sid ?? '' };
      }
      return undefined;
    });
  }

  // ---- session setup ------------------------------------------------------------

  private async openSignal(resume?: { participantSid: string; resumeToken: string }): Promise<JoinedMessage> {
    this.signal?.close();
    const signal = new SignalClient({
      message: (msg) => {
        if (this.signal === signal) this.onMessage(msg);
      },
      lost: (reason) => {
        if (this.signal === signal) this.onSignalLost(reason);
      },
    });
    this.signal = signal;
    try {
      return await signal.join(this.url, {
        type: 'join',
        token: this.token,
        protocol: PROTOCOL_VERSION,
        name: this.opts.name,
        metadata: this.opts.metadata,
        autoSubscribe: this.opts.autoSubscribe ?? true,
        resume,
      });
    } catch (err) {
      signal.close();
      throw err;
    }
  }

  private async startSession(joined: JoinedMessage): Promise<void> {
    this.applyJoined(joined);
    this.createPeerConnections();
    await this.pubNegotiation.negotiate();
  }

  private applyJoined(joined: JoinedMessage): void {
    this.room = joined.room;
    this.localParticipant = joined.participant;
    this.resumeToken = joined.resumeToken;
    this.iceServers = (joined.iceServers ?? []).map((s) => ({
      urls: s.urls,
      username: s.username,
      credential: s.credential,
    }));
    const present = new Set<string>();
    for (const info of joined.participants ?? []) {
      if (info.sid === joined.participant.sid) continue;
      present.add(info.sid);
      this.upsertParticipant(info);
    }
    for (const p of [...this.participants.values()]) {
      if (!present.has(p.sid)) this.removeParticipant(p, 'left');
    }
  }

  private rtcConfig(): RTCConfiguration {
    return {
      iceServers: [...this.iceServers, ...(this.opts.iceServers ?? [])],
      iceTransportPolicy: this.opts.iceTransportPolicy ?? 'all',
      bundlePolicy: 'max-bundle',
    };
  }

  private createPeerConnections(): void {
    const pub = new RTCPeerConnection(this.rtcConfig());
    const sub = new RTCPeerConnection(this.rtcConfig());
    this.pub = pub;
    this.sub = sub;
    this.subMids.clear();
    this.pubCandidates.clear();
    this.subCandidates.clear();
    for (const [pc, target] of [
      [pub, 'publisher'],
      [sub, 'subscriber'],
    ] as const) {
      pc.onicecandidate = (ev) => this.sendTrickle(target, ev.candidate);
      pc.oniceconnectionstatechange = () => this.onIceState(pc, target);
    }
    // Both channels exist before the first offer so that the server sees them in it.
    this.reliable = pub.createDataChannel('_reliable', { ordered: true });
    this.lossy = pub.createDataChannel('_lossy', { ordered: false, maxRetransmits: 0 });
    this.listenData(this.reliable, true);
    this.listenData(this.lossy, false);
    sub.ondatachannel = (ev) => this.listenData(ev.channel, ev.channel.label !== '_lossy');
    sub.ontrack = (ev) => this.onTrack(ev);
  }

  private async publisherRound(iceRestart: boolean): Promise<void> {
    const pc = this.pub;
    const signal = this.signal;
    if (!pc || !signal) throw new Error('negotiate: not connected');
    const offer = await pc.createOffer({ iceRestart });
    await pc.setLocalDescription(offer);
    try {
      // The answer comes as an `answer` message; take it whether or not it carries our id.
      const answered = new Promise<string>((resolve) => (this.answerWaiter = resolve));
      const replied = signal
        .request({ type: 'offer', sdp: offer.sdp ?? '' })
        .then((m) => ('sdp' in m && typeof m.sdp === 'string' ? m.sdp : answered));
      const sdp = await Promise.race([replied, answered]);
      if (pc.signalingState === 'closed') return;
      await pc.setRemoteDescription({ type: 'answer', sdp });
      await this.pubCandidates.flush();
    } catch (err) {
      if (pc.signalingState === 'have-local-offer') await pc.setLocalDescription({ type: 'rollback' }).catch(() => {});
      throw err;
    } finally {
      this.answerWaiter = null;
    }
  }

  private async subscriberRound(sdp: string): Promise<void> {
    const pc = this.sub;
    if (!pc || pc.signalingState === 'closed') return;
    // Before setRemoteDescription, because ontrack fires inside it.
    this.subMids = msidByMid(sdp);
    await pc.setRemoteDescription({ type: 'offer', sdp });
    await this.subCandidates.flush();
    const answer = await pc.createAnswer();
    await pc.setLocalDescription(answer);
    this.signal?.send({ type: 'answer', sdp: answer.sdp ?? '' });
  }

  // ---- server messages ----------------------------------------------------------

  private onMessage(msg: ServerMessage): void {
    switch (msg.type) {
      case 'answer':
        this.answerWaiter?.(msg.sdp);
        break;
      case 'offer':
        this.subQueue
          .run(() => this.subscriberRound(msg.sdp))
          .catch((err) => console.error('petrel: subscriber negotiation failed', err));
        break;
      case 'trickle':
        void (msg.target === 'publisher' ? this.pubCandidates : this.subCandidates).add(msg.candidate);
        break;
      case 'participantJoined':
      case 'participantUpdated':
        if (msg.participant.sid !== this.localParticipant?.sid) this.upsertParticipant(msg.participant);
        else this.localParticipant = msg.participant;
        break;
      case 'participantLeft': {
        const p = this.participants.get(msg.participantSid);
        if (p) this.removeParticipant(p, msg.reason);
        break;
      }
      case 'trackPublished': {
        const p = this.participants.get(msg.participantSid);
        if (p && !p.tracks.has(msg.track.sid)) this.addPublication(p, msg.track);
        break;
      }
      case 'trackUnpublished': {
        const p = this.participants.get(msg.participantSid);
        const pub = p?.tracks.get(msg.trackSid);
        if (p && pub) this.removePublication(p, pub);
        break;
      }
      case 'trackMuted': {
        const local = this.localTracks.get(msg.trackSid);
        if (local) {
          // Muted by an admin: follow it locally so the page shows the truth.
          local.info = { ...local.info, muted: msg.muted };
          local.track.enabled = !msg.muted;
          break;
        }
        const p = this.participants.get(msg.participantSid);
        const pub = p?.tracks.get(msg.trackSid);
        if (p && pub && pub.info.muted !== msg.muted) {
          pub.info = { ...pub.info, muted: msg.muted };
          this.emit('trackMuted', pub, p, msg.muted);
        }
        break;
      }
      case 'dominantSpeaker':
        this.dominantSpeaker = msg.participantSid;
        this.emit('dominantSpeakerChanged', msg.participantSid, this.participants.get(msg.participantSid));
        break;
      case 'trackDemand':
        void this.applyDemand(msg.trackSid, msg.active, msg.layers);
        break;
      case 'trackSubscribed': {
        const pub = this.participants.get(msg.participantSid)?.tracks.get(msg.trackSid);
        if (pub) pub.subscribed = true;
        break;
      }
      case 'trackUnsubscribed': {
        const p = this.participants.get(msg.participantSid);
        const pub = p?.tracks.get(msg.trackSid);
        if (pub) this.dropSubscription(pub, p);
        break;
      }
      case 'error':
        console.warn(`petrel: server error ${msg.code}: ${msg.message}`);
        if (FATAL_CODES.has(msg.code)) this.finish(msg.code);
        break;
      case 'leave':
        this.finish(msg.reason || 'leave');
        break;
      default:
        break;
    }
  }

  // Nobody needs some of our encodings (or the whole track): stop encoding them,
  // which saves our CPU and uplink. Re-enabled encodings start with a keyframe.
  // Demands are applied one at a time per sender, each time the latest one: a
  // setParameters still in flight makes the next getParameters stale, and Chrome
  // then rejects the update (the encoder would stay off).
  private async applyDemand(trackSid: string, active: boolean, layers?: boolean[]): Promise<void> {
    const pub = this.localTracks.get(trackSid);
    if (!pub) return;
    pub.demand = { active, layers };
    await pub.demandQueue.run(async () => {
      const sender = pub.transceiver.sender;
      const want = pub.demand;
      const params = sender.getParameters();
      if (!want || !params.encodings?.length) return;
      const rids = ['q', 'h', 'f'];
      for (const enc of params.encodings) {
        const i = enc.rid ? rids.indexOf(enc.rid) : -1;
        enc.active = want.active && (i < 0 || !want.layers || want.layers[i] !== false);
      }
      try {
        await sender.setParameters(params);
      } catch (err) {
        console.warn('petrel: could not apply track demand', err);
      }
    });
  }

  private upsertParticipant(info: ParticipantInfo): void {
    let p = this.participants.get(info.sid);
    if (!p) {
      p = new RemoteParticipant(info);
      this.participants.set(info.sid, p);
      this.emit('participantJoined', p);
    } else {
      p.info = info;
      this.emit('participantUpdated', p);
    }
    // The track list in ParticipantInfo is authoritative; reconcile with what we hold.
    const listed = new Set<string>();
    for (const t of info.tracks ?? []) {
      listed.add(t.sid);
      const pub = p.tracks.get(t.sid);
      if (!pub) this.addPublication(p, t);
      else if (pub.info.muted !== t.muted) {
        pub.info = t;
        this.emit('trackMuted', pub, p, t.muted);
      } else pub.info = t;
    }
    for (const pub of [...p.tracks.values()]) if (!listed.has(pub.sid)) this.removePublication(p, pub);
  }

  private removeParticipant(p: RemoteParticipant, reason: string): void {
    for (const pub of [...p.tracks.values()]) this.removePublication(p, pub);
    this.participants.delete(p.sid);
    this.emit('participantLeft', p, reason);
  }

  private addPublication(p: RemoteParticipant, info: TrackInfo): void {
    const pub = new RemoteTrackPublication(info, p.sid);
    p.tracks.set(info.sid, pub);
    this.emit('trackPublished', pub, p);
    const orphan = this.orphanTracks.get(info.sid);
    if (orphan) {
      this.orphanTracks.delete(info.sid);
      this.attachTrack(pub, p, orphan);
    }
  }

  private removePublication(p: RemoteParticipant, pub: RemoteTrackPublication): void {
    this.dropSubscription(pub, p);
    p.tracks.delete(pub.sid);
    this.emit('trackUnpublished', pub, p);
  }

  private dropSubscription(pub: RemoteTrackPublication, p: RemoteParticipant | undefined): void {
    pub.subscribed = false;
    const track = pub.track;
    pub.track = undefined;
    if (track) this.emit('trackUnsubscribed', track, pub, p);
  }

  private onTrack(ev: RTCTrackEvent): void {
    const mid = ev.transceiver.mid;
    const m = mid !== null ? this.subMids.get(mid) : undefined;
    const trackSid = m?.trackId ?? ev.track.id;
    const participantSid = m?.streamId ?? ev.streams[0]?.id ?? '';
    const p = this.participants.get(participantSid);
    const pub = p?.tracks.get(trackSid);
    if (!p || !pub) {
      this.orphanTracks.set(trackSid, ev.track);
      return;
    }
    this.attachTrack(pub, p, ev.track);
  }

  private attachTrack(pub: RemoteTrackPublication, p: RemoteParticipant, track: MediaStreamTrack): void {
    // A reused transceiver brings the same track object for a new publication.
    if (pub.track === track) return;
    pub.track = track;
    pub.subscribed = true;
    this.emit('trackSubscribed', track, pub, p);
  }

  private listenData(dc: RTCDataChannel, reliable: boolean): void {
    dc.binaryType = 'arraybuffer';
    dc.onmessage = (ev) => {
      const buf = typeof ev.data === 'string' ? textEncoder.encode(ev.data) : new Uint8Array(ev.data as ArrayBuffer);
      const msg = decodeData(buf);
      if (!msg) return;
      const { header, payload } = msg;
      this.emit('dataReceived', {
        payload,
        text: header.text ? textDecoder.decode(payload) : undefined,
        from: header.from,
        fromSid: header.fromSid,
        topic: header.topic,
        reliable,
        participant: header.fromSid ? this.participants.get(header.fromSid) : undefined,
      });
    };
  }

  // ---- ICE and reconnection -----------------------------------------------------

  private sendTrickle(target: PcTarget, c: RTCIceCandidate | null): void {
    try {
      this.signal?.send({ type: 'trickle', target, candidate: c ? c.toJSON() : null });
    } catch {
      // The socket is down; the ICE restart after resuming gathers candidates again.
    }
  }

  private onIceState(pc: RTCPeerConnection, target: PcTarget): void {
    const state = pc.iceConnectionState;
    clearTimeout(this.iceTimers[target]);
    if (this.state !== 'connected') return;
    if (state === 'failed') this.restartIceOf(target);
    else if (state === 'disconnected') {
      // Often recovers by itself (a brief loss); restart only if it does not.
      this.iceTimers[target] = setTimeout(() => {
        if (pc.iceConnectionState === 'disconnected') this.restartIceOf(target);
      }, ICE_DISCONNECTED_GRACE_MS);
    }
  }

  private restartIceOf(target: PcTarget): void {
    if (!this.signal?.open) return;
    const done =
      target === 'publisher'
        ? this.pubNegotiation.negotiate({ iceRestart: true })
        : this.signal.request({ type: 'restartIce' });
    done.catch((err) => console.warn(`petrel: ICE restart of ${target} failed`, err));
  }

  private onSignalLost(reason: string): void {
    if (this.state !== 'connected') return;
    void this.reconnect(reason);
  }

  private async reconnect(reason: string): Promise<void> {
    this.setState('reconnecting');
    this.emit('reconnecting');
    console.info(`petrel: reconnecting (${reason})`);
    const deadline = Date.now() + (this.opts.reconnectWindowMs ?? 20_000);
    let delay = 250;
    while (Date.now() < deadline && this.state === 'reconnecting') {
      await sleep(delay);
      delay = Math.min(delay * 2, 2_000);
      if (this.state !== 'reconnecting') return;
      try {
        // Without a resume token (or once the server said it no longer knows us)
        // join as a new participant.
        const joined = await this.openSignal(
          this.resumeToken
            ? { participantSid: this.localParticipant?.sid ?? '', resumeToken: this.resumeToken }
            : undefined,
        );
        if (joined.resumed) {
          this.applyJoined(joined);
          // Fresh TURN credentials for the restart: the old ones may have expired.
          for (const pc of [this.pub, this.sub]) pc?.setConfiguration(this.rtcConfig());
          // Same PCs, new paths: the publisher restarts by offering, the subscriber on request.
          this.setState('connected');
          this.restartIce();
        } else {
          await this.rejoin(joined);
          this.setState('connected');
        }
        this.emit('reconnected');
        return;
      } catch (err) {
        if (err instanceof PetrelError && err.code === 'not_found') {
          this.resumeToken = ''; // the resume window has passed: rejoin next
        } else if (err instanceof PetrelError && FATAL_CODES.has(err.code)) {
          this.finish(err.code);
          return;
        }
        console.info('petrel: reconnect attempt failed', err);
      }
    }
    if (this.state === 'reconnecting') this.finish('reconnect_failed');
  }

  // The server no longer knew us (resume window passed): we are a new participant,
  // so build fresh connections and publish the same local tracks again.
  private async rejoin(joined: JoinedMessage): Promise<void> {
    for (const p of this.participants.values()) for (const pub of p.tracks.values()) this.dropSubscription(pub, p);
    const old = [...this.localTracks.values()];
    this.localTracks.clear();
    for (const pub of old) this.emit('localTrackUnpublished', pub);
    this.closePeerConnections();
    await this.startSession(joined);
    for (const pub of old) {
      if (pub.track.readyState === 'live') {
        await this.publishTrack(pub.track, { source: pub.source, name: pub.info.name, simulcast: pub.info.simulcast });
      }
    }
  }

  // ---- teardown -----------------------------------------------------------------

  private finish(reason: string): void {
    if (this.state === 'disconnected') return;
    for (const pub of this.localTracks.values()) pub.track.stop();
    this.localTracks.clear();
    for (const p of [...this.participants.values()]) {
      for (const pub of p.tracks.values()) this.dropSubscription(pub, p);
    }
    this.participants.clear();
    this.teardown();
    this.setState('disconnected');
    this.emit('disconnected', reason);
  }

  private teardown(): void {
    window.removeEventListener('online', this.onOnline);
    window.removeEventListener('pagehide', this.onPageHide);
    if (this.qualityTimer) clearInterval(this.qualityTimer);
    this.qualityTimer = null;
    const signal = this.signal;
    this.signal = null;
    signal?.close();
    this.closePeerConnections();
  }

  private closePeerConnections(): void {
    for (const t of Object.values(this.iceTimers)) clearTimeout(t);
    this.pub?.close();
    this.sub?.close();
    this.pub = this.sub = null;
    this.reliable = this.lossy = null;
    this.orphanTracks.clear();
    this.localStream = new MediaStream();
  }

  private setState(state: ConnectionState): void {
    if (this.state === state) return;
    this.state = state;
    this.emit('connectionStateChanged', state);
  }

  private startQualityTimer(): void {
    this.qualityTimer = setInterval(async () => {
      if (this.state !== 'connected') return;
      try {
        const stats = await this.getStats();
        if (stats.quality !== this.quality) {
          this.quality = stats.quality;
          this.emit('connectionQuality', stats.quality, stats);
        }
      } catch {
        /* a PC closed under us; the next tick sees the new state */
      }
    }, this.opts.qualityIntervalMs ?? 2_000);
  }
}

// Accepts http(s) and ws(s) URLs, with or without the /v1/rtc path.
export function wsUrl(url: string): string {
  const u = new URL(url, typeof location !== 'undefined' ? location.href : undefined);
  if (u.protocol === 'http:') u.protocol = 'ws:';
  else if (u.protocol === 'https:') u.protocol = 'wss:';
  if (u.pathname === '' || u.pathname === '/') u.pathname = '/v1/rtc';
  return u.toString();
}

// Layers from low to full, with bitrates that suit each size at 30 fps.
function simulcastLayers(s: MediaTrackSettings): LayerInfo[] {
  const w = s.width ?? 1280;
  const h = s.height ?? 720;
  return [
    { rid: 'q', width: Math.round(w / 4), height: Math.round(h / 4), maxBitrate: 150_000 },
    { rid: 'h', width: Math.round(w / 2), height: Math.round(h / 2), maxBitrate: 500_000 },
    { rid: 'f', width: w, height: h, maxBitrate: 1_500_000 },
  ];
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

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

export type { ClientMessage };
