// Room: one participant's session in a Petrel room (protocol v1). It owns the
// signaling socket and the two peer connections, keeps the room state the server
// reports, and turns it into typed events.
import { negotiateDependencyDescriptor, svcMime, SVC_MODE, type SvcCodec } from './svc.js';
import { CandidateBuffer, Serializer, TaskQueue } from './negotiation.js';
import { decodeData, encodeData } from './data.js';
import { Emitter } from './emitter.js';
import {
  type ClientMessage,
  type JoinedMessage,
  type LayerInfo,
  type ParticipantInfo,
  type PcTarget,
  type RoomInfo,
  type RoomRecording,
  type ServerMessage,
  type TrackInfo,
  type TrackKind,
  FATAL_CODES,
  PROTOCOL_VERSION,
  PetrelError,
} from './protocol.js';
import { type MsidInfo, msidByMid, rejectUndecodable } from './sdp.js';
import { SignalClient } from './signal.js';
import { type ClusterNode, clusterNodes, failover, placeParticipant, tokenRoom } from './cluster.js';
import { type ConnectionQuality, type StatsSummary, StatsCollector } from './stats.js';
import { E2EE, type E2EEState } from './e2ee.js';
import { VideoObserver } from './observe.js';
import { DirectMode, type P2PSignal } from './p2p.js';

export { gathered } from './p2p.js';
import {
  type ConnectOptions,
  type ConnectionState,
  type DataMessage,
  type MediaPath,
  type PublishOptions,
  type RoomEvents,
  type SendDataOptions,
  type TrackSettings,
  LocalTrackPublication,
  RemoteParticipant,
  RemoteTrackPublication,
} from './roomtypes.js';

export {
  type ConnectOptions,
  type ConnectionState,
  type DataMessage,
  type MediaPath,
  type PublishOptions,
  type RoomEvents,
  type SendDataOptions,
  type TrackSettings,
  LocalTrackPublication,
  RemoteParticipant,
  RemoteTrackPublication,
};


const textDecoder = new TextDecoder();
const receiveCodecs = (kind: 'audio' | 'video') => globalThis.RTCRtpReceiver?.getCapabilities?.(kind)?.codecs;
const textEncoder = new TextEncoder();
const ICE_DISCONNECTED_GRACE_MS = 5_000;
// Switching a camera to simulcast: how long to wait for the server to ask for the
// new publication's media, then how long both stay up so that viewers decode the
// new one before the old one goes.
const SIMULCAST_SWITCH_WAIT_MS = 8_000;
const SIMULCAST_OVERLAP_MS = 1_500;
// A move to another node (reconnect hint: drain, re-placement) is make before
// break: the old connections stay until the new ones decode everyone's video,
// or this long.
const MOVE_MEDIA_WAIT_MS = 4_000;
const MOVE_SETUP_TIMEOUT_MS = 10_000;
// ...and then this long more, for those still on the old node: they get our new
// stream through the node link (a mirror beside our old session) only after a
// subscriber renegotiation and a keyframe there.
const MOVE_OVERLAP_MS = 500;

export class Room extends Emitter<RoomEvents> {
  state: ConnectionState = 'disconnected';
  room?: RoomInfo;
  localParticipant?: ParticipantInfo;
  readonly participants = new Map<string, RemoteParticipant>();
  readonly localTracks = new Map<string, LocalTrackPublication>();
  quality: ConnectionQuality = 'unknown';
  dominantSpeaker?: string;
  /** Where camera and microphone travel now (see ConnectOptions.p2p). */
  mediaPath: MediaPath = 'sfu';

  // Local track sids being republished with simulcast.
  private upgrading = new Set<string>();
  private url = '';
  private token = '';
  private opts: ConnectOptions = {};
  private signal: SignalClient | null = null;
  private resumeToken = '';
  // Cluster placement (ConnectOptions.cluster): the nodes known at connect and
  // the one this room is on.
  private clusterNodes: ClusterNode[] = [];
  private clusterNode = '';
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
  // Subscriber media sections declined because this browser cannot decode them.
  private subRejected = new Set<string>();
  // Tracks that arrived before the server told us who published them.
  private orphanTracks = new Map<string, MediaStreamTrack>();
  private localStream = new MediaStream();
  private stats = new StatsCollector();
  private qualityTimer: ReturnType<typeof setInterval> | null = null;
  private videoObservers = new Map<HTMLElement, VideoObserver>();
  private iceTimers: Partial<Record<PcTarget, ReturnType<typeof setTimeout>>> = {};
  // Sessions of an identity already shown (it moves): successor sid -> the participant shown.
  private successorOf = new Map<string, RemoteParticipant>();
  // A move in progress: participants that left the old node meanwhile stay
  // shown (frozen) until the new node's session takes them over.
  private moving = false;
  private leftDuringMove = new Set<string>();
  private crypto: E2EE | null = null;
  // The receiver each remote track arrived on, and what each receiver shows now.
  private receiverOf = new WeakMap<MediaStreamTrack, RTCRtpReceiver>();
  private shownBy = new Map<number, { pub: RemoteTrackPublication; p: RemoteParticipant }>();
  private p2p = new DirectMode({
    allowed: () => this.opts.p2p !== false && !this.crypto,
    connected: () => this.state === 'connected',
    localSid: () => this.localParticipant?.sid,
    participants: this.participants,
    localTracks: this.localTracks,
    rtcConfig: () => this.rtcConfig(),
    relay: (to, data) => void this.signal?.request({ type: 'relay', to, data }).catch(() => {}),
    pathChanged: (path, reason) => this.setMediaPath(path, reason),
  });

  /** The end-to-end encryption of this room (ConnectOptions.e2ee): setKey, ratchetKey, stats. */
  get e2ee(): E2EE | null {
    return this.crypto;
  }

  /** The publisher peer connection (client offers), for diagnostics and tests. */
  get publisherPc(): RTCPeerConnection | null {
    return this.pub;
  }
  /** The subscriber peer connection (server offers), for diagnostics and tests. */
  get subscriberPc(): RTCPeerConnection | null {
    return this.sub;
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
    if (!this.signal) throw new Error('relay: not connected');
    await this.signal.request({ type: 'relay', to: toSid, data });
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
      const joined = await this.openSignal();
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
    const pc = this.pub;
    if (!pc || !this.signal) throw new Error('publishTrack: not connected');
    if (this.crypto && opts.codec && /h26[45]/i.test(opts.codec)) {
      throw new Error('publishTrack: H.264 and H.265 cannot be end-to-end encrypted (their NAL headers would be sealed)');
    }
    const settings = track.getSettings();
    const svc = track.kind === 'video' && opts.svc ? svcMime(opts.svc) : undefined;
    const simulcast = !!svc || (opts.simulcast ?? this.participants.size + 1 > 2);
    const layers = simulcast && track.kind === 'video' ? simulcastLayers(settings) : undefined;
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
      sendEncodings: svc
        ? [{ scalabilityMode: SVC_MODE, maxBitrate: 2_000_000 } as RTCRtpEncodingParameters]
        : layers?.map((l) => ({
            rid: l.rid,
            maxBitrate: l.maxBitrate,
            scaleResolutionDownBy: l.rid === 'q' ? 4 : l.rid === 'h' ? 2 : 1,
          })),
    });
    if (svc) {
      // The layers (sizes) announced above are the spatial layers of the one encoding.
      preferCodec(transceiver, track.kind, svc);
      // VP9 names its layers in its payload descriptor; AV1 only in the descriptor extension.
      if (opts.svc === 'av1') negotiateDependencyDescriptor(transceiver);
    } else if (opts.codec) preferCodec(transceiver, track.kind, opts.codec);
    else if (this.crypto && track.kind === 'video') preferCodec(transceiver, 'video', 'video/VP8');
    this.crypto?.attachSender(transceiver.sender, track.kind);
    const pub = new LocalTrackPublication(info, track, transceiver, !!layers, opts.simulcast === undefined);
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
    void this.p2p.syncSenders();
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
    void this.p2p.syncSenders();
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

  /**
   * Adaptive subscription: reports the size `el` is shown at (debounced, on every
   * resize) so the server sends the smallest layer that looks sharp there, and
   * pauses the video while the page is hidden or the element is off-screen.
   * Returns a function that stops observing.
   */
  observeVideo(trackSid: string, el: HTMLElement): () => void {
    this.unobserveVideo(el);
    const o = new VideoObserver(el, (settings) => {
      if (!this.signal?.open) return;
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
    if (!this.signal) throw new Error('setLastN: not connected');
    await this.signal.request({ type: 'setLastN', n });
  }

  /**
   * Receive at most `bitrate` bit/s (0: no cap): the server lowers layers and
   * frame rates to fit, as it does when the network is the limit.
   */
  async setMaxBitrate(bitrate: number): Promise<void> {
    if (!this.signal) throw new Error('setMaxBitrate: not connected');
    await this.signal.request({ type: 'setMaxBitrate', bitrate });
  }

  /** Always receive these participants' video, whatever Last-N says (replaces earlier pins). */
  async pin(participantSids: string[]): Promise<void> {
    if (!this.signal) throw new Error('pin: not connected');
    await this.signal.request({ type: 'pin', participantSids });
  }

  /**
   * Starts recording this room (every published track); the token needs the
   * `record` grant. A room already being recorded answers its recording.
   */
  async startRecording(): Promise<RoomRecording> {
    if (!this.signal) throw new Error('startRecording: not connected');
    const r = await this.signal.request({ type: 'startRecording' });
    return (r as unknown as { recording: RoomRecording }).recording;
  }

  /** Stops this room's recording (the `record` grant). */
  async stopRecording(): Promise<RoomRecording> {
    if (!this.signal) throw new Error('stopRecording: not connected');
    const r = await this.signal.request({ type: 'stopRecording' });
    return (r as unknown as { recording: RoomRecording }).recording;
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
    return this.stats.collect(this.pub, this.sub, (direction, mid, via) => {
      if (mid === undefined) return undefined;
      // The direct connection carries the camera and microphone of each side.
      if (via === 'direct') return this.p2p.statsTarget(direction, mid, this.localParticipant?.sid ?? '');
      if (direction === 'inbound') {
        const m = this.subMids.get(mid);
        return m && { trackSid: m.trackId, participantSid: m.streamId };
      }
      for (const pub of this.localTracks.values()) {
        if (pub.transceiver.mid === mid) return { trackSid: pub.sid, participantSid: this.localParticipant?.sid ?? '' };
      }
      return undefined;
    }, this.p2p.pc);
  }

  // ---- session setup ------------------------------------------------------------

  // The join request, for this node (with a resume) or the node a move goes to.
  private joinMessage(resume?: { participantSid: string; resumeToken: string }): Extract<ClientMessage, { type: 'join' }> {
    return {
      type: 'join',
      token: this.token,
      protocol: PROTOCOL_VERSION,
      name: this.opts.name,
      metadata: this.opts.metadata,
      autoSubscribe: this.opts.autoSubscribe ?? true,
      resume,
    };
  }

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
      return await signal.join(this.url, this.joinMessage(resume));
    } catch (err) {
      signal.close();
      throw err;
    }
  }

  private async startSession(joined: JoinedMessage): Promise<void> {
    this.applyJoined(joined);
    this.crypto?.setIdentity(joined.participant.identity);
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
      if (present.has(p.sid)) continue;
      // Gone, but its successor is here (it moved nodes): the same tile.
      if (p.successor && present.has(p.successor.sid)) this.promote(p);
      else this.removeParticipant(p, 'left');
    }
  }

  private rtcConfig(): RTCConfiguration {
    return {
      iceServers: [...this.iceServers, ...(this.opts.iceServers ?? [])],
      iceTransportPolicy: this.opts.iceTransportPolicy ?? 'all',
      bundlePolicy: 'max-bundle',
      // Chromium's encoded streams work only on connections made with this.
      ...(this.crypto?.needsInsertableStreams ? { encodedInsertableStreams: true } : {}),
    } as RTCConfiguration;
  }

  private createPeerConnections(): void {
    const pub = new RTCPeerConnection(this.rtcConfig());
    const sub = new RTCPeerConnection(this.rtcConfig());
    this.pub = pub;
    this.sub = sub;
    this.subMids.clear();
    this.subRejected = new Set();
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
    const offer = rejectUndecodable(sdp, this.subRejected, receiveCodecs);
    // Before setRemoteDescription, because ontrack fires inside it.
    this.subMids = msidByMid(offer.sdp);
    await pc.setRemoteDescription({ type: 'offer', sdp: offer.sdp });
    // AV1 SVC arrives with its dependency descriptor only if the answer takes it.
    for (const t of pc.getTransceivers()) if (t.receiver.track.kind === 'video') negotiateDependencyDescriptor(t);
    await this.subCandidates.flush();
    const answer = await pc.createAnswer();
    await pc.setLocalDescription(answer);
    this.signal?.send({ type: 'answer', sdp: answer.sdp ?? '' });
    for (const mid of offer.newly) this.reportUnsupported(mid);
  }

  private reportUnsupported(mid: string): void {
    const m = this.subMids.get(mid);
    const p = m && this.participants.get(m.streamId);
    const pub = m && p?.tracks.get(m.trackId);
    console.warn(`petrel: cannot decode the codec of track ${m?.trackId ?? `in section ${mid}`}: not receiving it`);
    if (!p || !pub) return;
    pub.unsupported = 'codec_unsupported';
    this.emit('trackUnsupported', pub, p, 'codec_unsupported');
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
        if (msg.type === 'participantJoined') {
          this.p2p.evaluate();
          this.growSimulcast();
        }
        break;
      case 'participantLeft': {
        this.participantLeft(msg.participantSid, msg.reason);
        this.p2p.evaluate();
        break;
      }
      case 'relay':
        void this.p2p.onRelay(msg.from, msg.data as P2PSignal).catch((err) => console.warn('petrel: p2p signaling failed', err));
        this.emit('relayReceived', msg.from, msg.data);
        break;
      case 'trackPublished': {
        const p = this.participants.get(msg.participantSid);
        if (p && !p.tracks.has(msg.track.sid)) this.addPublication(p, msg.track);
        const prev = p ? undefined : this.successorOf.get(msg.participantSid);
        if (prev?.successor) {
          // A moving participant's new session publishes: its track takes over
          // the shown publication of the same kind and source when it arrives.
          const tracks = (prev.successor.tracks ?? []).filter((t) => t.sid !== msg.track.sid);
          prev.successor = { ...prev.successor, tracks: [...tracks, msg.track] };
          const orphan = this.orphanTracks.get(msg.track.sid);
          const pub = orphan && this.takeOver(prev, msg.track.sid);
          if (orphan && pub) {
            this.orphanTracks.delete(msg.track.sid);
            this.attachTrack(pub, prev, orphan);
          }
        }
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

  // Nobody needs some of our encodings (or the whole track): stop encoding them,
  // which saves our CPU and uplink. Re-enabled encodings start with a keyframe.
  // Demands are applied one at a time per sender, each time the latest one: a
  // setParameters still in flight makes the next getParameters stale, and Chrome
  // then rejects the update (the encoder would stay off).
  private async applyDemand(trackSid: string, active: boolean, layers?: boolean[]): Promise<void> {
    const pub = this.localTracks.get(trackSid);
    if (!pub) return;
    pub.demand = { active, layers };
    if (active) for (const w of pub.demandWaiters.splice(0)) w();
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

  // The room has grown past two: cameras published as one encoding (by the SDK's
  // choice, not the caller's) are republished with simulcast, so that each
  // viewer can get the layer it needs. Chrome cannot add encodings to a sender,
  // hence a new publication of a clone of the track. Make before break: the old
  // one keeps flowing until the server asks for the new one's media (someone
  // subscribes to it) and a moment more for the viewers' first keyframe; the app
  // swaps tiles to the new track on its first frame.
  private growSimulcast(): void {
    if (this.participants.size + 1 <= 2 || this.state !== 'connected') return;
    for (const pub of [...this.localTracks.values()]) {
      if (pub.kind !== 'video' || pub.source !== 'camera' || pub.simulcast || !pub.autoSimulcast) continue;
      if (this.upgrading.has(pub.sid) || pub.track.readyState !== 'live') continue;
      this.upgrading.add(pub.sid);
      this.republishSimulcast(pub)
        .catch((err) => console.warn('petrel: could not switch the camera to simulcast', err))
        .finally(() => this.upgrading.delete(pub.sid));
    }
  }

  private async republishSimulcast(old: LocalTrackPublication): Promise<void> {
    const track = old.track.clone();
    let next: LocalTrackPublication;
    try {
      next = await this.publishTrack(track, { source: old.source, name: old.info.name, simulcast: true });
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
    await sleep(SIMULCAST_OVERLAP_MS);
    if (this.localTracks.get(old.sid) !== old || this.localTracks.get(next.sid) !== next) return;
    await this.unpublishTrack(old.sid);
    console.info(`petrel: camera now simulcast (${old.sid} -> ${next.sid})`);
  }

  private upsertParticipant(info: ParticipantInfo): void {
    // Our own session on another node (we are moving): not someone else.
    if (info.identity === this.localParticipant?.identity) return;
    let p = this.participants.get(info.sid);
    const prev = p ? undefined : this.successorOf.get(info.sid) ?? this.byIdentity(info.identity);
    if (prev) {
      // The same person's second session (it moves to another node): keep
      // showing it as one participant; its tracks take over as they arrive.
      prev.successor = info;
      this.successorOf.set(info.sid, prev);
      return;
    }
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

  private byIdentity(identity: string): RemoteParticipant | undefined {
    for (const p of this.participants.values()) if (p.identity === identity) return p;
    return undefined;
  }

  private participantLeft(sid: string, reason: string): void {
    const p = this.participants.get(sid);
    if (p?.successor) this.promote(p);
    else if (p && this.moving) this.leftDuringMove.add(sid);
    else if (p) this.removeParticipant(p, reason);
    else {
      const shown = this.successorOf.get(sid);
      this.successorOf.delete(sid);
      if (shown?.successor?.sid === sid) shown.successor = undefined;
    }
  }

  // The publication of p that the successor's track `trackSid` replaces (same
  // kind and source, not yet taken over), re-keyed to the new track; a new
  // publication if there is none.
  private takeOver(p: RemoteParticipant, trackSid: string): RemoteTrackPublication | undefined {
    const t = p.successor?.tracks?.find((x) => x.sid === trackSid);
    if (!t) return undefined;
    const taken = new Set((p.successor?.tracks ?? []).map((x) => x.sid));
    for (const pub of p.tracks.values()) {
      if (taken.has(pub.sid) || pub.kind !== t.kind || pub.source !== t.source) continue;
      p.tracks.delete(pub.sid);
      pub.info = t;
      p.tracks.set(t.sid, pub);
      return pub;
    }
    const pub = new RemoteTrackPublication(t, p.sid);
    p.tracks.set(t.sid, pub);
    this.emit('trackPublished', pub, p);
    return pub;
  }

  // The old session of a moving participant is gone: the shown participant
  // becomes its successor (same object, tiles and publications, new sids).
  private promote(p: RemoteParticipant): void {
    const info = p.successor;
    if (!info) return;
    const oldSid = p.sid;
    for (const t of info.tracks ?? []) if (!p.tracks.has(t.sid)) this.takeOver(p, t.sid);
    p.successor = undefined;
    this.successorOf.delete(info.sid);
    this.leftDuringMove.delete(oldSid);
    this.participants.delete(oldSid);
    p.info = info;
    this.participants.set(info.sid, p);
    for (const pub of p.tracks.values()) pub.participantSid = info.sid;
    this.emit('participantMoved', p, oldSid);
    this.upsertParticipant(info);
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
    pub.sfuTrack = undefined;
    if (track) this.emit('trackUnsubscribed', track, pub, p);
  }

  private onTrack(ev: RTCTrackEvent): void {
    // At once: Chromium's encoded streams must be taken before frames arrive.
    if (this.crypto) {
      this.crypto.attachReceiver(ev.receiver);
      this.receiverOf.set(ev.track, ev.receiver);
    }
    const mid = ev.transceiver.mid;
    const m = mid !== null ? this.subMids.get(mid) : undefined;
    const trackSid = m?.trackId ?? ev.track.id;
    const participantSid = m?.streamId ?? ev.streams[0]?.id ?? '';
    const p = this.participants.get(participantSid) ?? this.successorOf.get(participantSid);
    const pub = p?.tracks.get(trackSid) ?? (p?.successor?.sid === participantSid ? this.takeOver(p, trackSid) : undefined);
    if (!p || !pub) {
      this.orphanTracks.set(trackSid, ev.track);
      return;
    }
    this.attachTrack(pub, p, ev.track);
  }

  private attachTrack(pub: RemoteTrackPublication, p: RemoteParticipant, track: MediaStreamTrack): void {
    const receiver = this.receiverOf.get(track);
    if (this.crypto && receiver) this.shownBy.set(this.crypto.bind(receiver, p.identity), { pub, p });
    pub.sfuTrack = track;
    pub.subscribed = true;
    this.showTrack(pub, p);
  }

  // Points the publication at the track its media comes on now (SFU or direct)
  // and tells the page when that changes.
  private showTrack(pub: RemoteTrackPublication, p: RemoteParticipant): void {
    const track = this.p2p.remoteTrack(p, pub) ?? pub.sfuTrack;
    // A reused transceiver brings the same track object for a new publication.
    if (!track || pub.track === track) return;
    pub.track = track;
    this.emit('trackSubscribed', track, pub, p);
  }

  private onE2EEState(rid: number, state: E2EEState): void {
    const shown = this.shownBy.get(rid);
    if (!shown) return;
    shown.pub.e2eeState = state;
    this.emit('e2eeStateChanged', shown.pub, this.participants.get(shown.pub.participantSid) ?? shown.p, state);
  }

  private closeCrypto(): void {
    this.crypto?.close();
    this.crypto = null;
    this.shownBy.clear();
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

  // ---- media path ---------------------------------------------------------------

  private setMediaPath(path: MediaPath, reason: string): void {
    const changed = this.mediaPath !== path;
    this.mediaPath = path;
    // Tiles follow: the peer's camera and microphone from the path in use.
    for (const p of this.participants.values()) for (const pub of p.tracks.values()) this.showTrack(pub, p);
    if (changed) {
      console.info(`petrel: media path ${path} (${reason})`);
      this.emit('mediaPathChanged', path, reason);
    }
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

  // The server asks us to move to another node (it drains, or the room is
  // re-placed). Make before break: join there with a second signaling socket
  // and pair of connections, publish the same tracks, and leave this node only
  // when the new connections decode everyone's video (MOVE_MEDIA_WAIT_MS at
  // most). Others see our new session as the successor of the old one (same
  // tile). If the new node cannot be joined, the old way: leave, then join.
  private moveTo(url: string, node: string | undefined, reason: string): void {
    if (this.state !== 'connected' || typeof url !== 'string' || !url || this.moving) return;
    this.moving = true;
    this.moveBeforeBreak(wsUrl(url), node, reason)
      .catch((err) => {
        console.warn(`petrel: could not move to ${url} before leaving; leaving, then joining`, err);
        if (this.state !== 'connected') return;
        this.endMove();
        this.leaveAndJoin(url, node, reason);
      })
      .finally(() => this.endMove());
  }

  // The server moved us to another room: join it anew with its token (a new
  // participant there), and publish the same local tracks. The server closes
  // this session; its socket's close finds us reconnecting and is ignored.
  private moveRoom(room: string, token: string): void {
    if (this.state !== 'connected' || typeof token !== 'string' || !token) return;
    this.token = token;
    this.resumeToken = '';
    this.signal?.close();
    this.emit('roomMoved', room);
    void this.reconnect(`moved to room ${room}`, 0);
  }

  private endMove(): void {
    if (!this.moving) return;
    this.moving = false;
    for (const sid of [...this.leftDuringMove]) {
      const p = this.participants.get(sid);
      if (p?.successor) this.promote(p);
      else if (p) this.removeParticipant(p, 'left');
    }
    this.leftDuringMove.clear();
  }

  private leaveAndJoin(url: string, node: string | undefined, reason: string): void {
    try {
      this.signal?.send({ type: 'leave' });
    } catch {
      /* already gone */
    }
    this.signal?.close();
    this.url = wsUrl(url);
    if (node) this.clusterNode = node;
    this.resumeToken = '';
    // At once: the new node is up and waiting, and others see us frozen meanwhile.
    void this.reconnect(`moved to another node (${reason})`, 0);
  }

  private async moveBeforeBreak(url: string, node: string | undefined, reason: string): Promise<void> {
    const t0 = performance.now();
    let adopted = false;
    let failed = '';
    let pc: { pub: RTCPeerConnection; sub: RTCPeerConnection } | null = null;
    const parts = new Map<string, ParticipantInfo>();
    const demands = new Map<string, { active: boolean; layers?: boolean[] }>();
    const tracks: RTCTrackEvent[] = [];
    const channels: RTCDataChannel[] = [];
    let subMids = new Map<string, MsidInfo>();
    const subRejected = new Set<string>();
    let answerWaiter: ((sdp: string) => void) | null = null;
    const subQueue = new TaskQueue();
    const pubCandidates = new CandidateBuffer(() => pc?.pub ?? null);
    const subCandidates = new CandidateBuffer(() => pc?.sub ?? null);
    const signal: SignalClient = new SignalClient({
      message: (msg) => {
        if (adopted) {
          if (this.signal === signal) this.onMessage(msg);
          return;
        }
        switch (msg.type) {
          case 'answer':
            answerWaiter?.(msg.sdp);
            break;
          case 'offer':
            subQueue
              .run(async () => {
                const sub = pc?.sub;
                if (!sub || sub.signalingState === 'closed') return;
                const offer = rejectUndecodable(msg.sdp, subRejected, receiveCodecs);
                subMids = msidByMid(offer.sdp);
                await sub.setRemoteDescription({ type: 'offer', sdp: offer.sdp });
                for (const t of sub.getTransceivers()) if (t.receiver.track.kind === 'video') negotiateDependencyDescriptor(t);
                await subCandidates.flush();
                const answer = await sub.createAnswer();
                await sub.setLocalDescription(answer);
                signal.send({ type: 'answer', sdp: answer.sdp ?? '' });
              })
              .catch((err) => (failed = `subscriber negotiation: ${err}`));
            break;
          case 'trickle':
            void (msg.target === 'publisher' ? pubCandidates : subCandidates).add(msg.candidate);
            break;
          case 'participantJoined':
          case 'participantUpdated':
            parts.set(msg.participant.sid, msg.participant);
            break;
          case 'participantLeft':
            parts.delete(msg.participantSid);
            break;
          case 'trackPublished':
          case 'trackUnpublished': {
            const info = parts.get(msg.participantSid);
            if (!info) break;
            const sid = msg.type === 'trackPublished' ? msg.track.sid : msg.trackSid;
            const rest = (info.tracks ?? []).filter((t) => t.sid !== sid);
            parts.set(info.sid, { ...info, tracks: msg.type === 'trackPublished' ? [...rest, msg.track] : rest });
            break;
          }
          case 'trackDemand':
            demands.set(msg.trackSid, { active: msg.active, layers: msg.layers });
            break;
          case 'leave':
            failed = `the new node said leave (${msg.reason})`;
            break;
          case 'error':
            if (FATAL_CODES.has(msg.code)) failed = `the new node refused: ${msg.code}`;
            break;
          default:
            break;
        }
      },
      lost: (why) => {
        if (!adopted) failed = `the new node's socket: ${why}`;
        else if (this.signal === signal) this.onSignalLost(why);
      },
    });
    const abort = (): void => {
      signal.close();
      pc?.pub.close();
      pc?.sub.close();
    };
    try {
      const joined = await signal.join(url, this.joinMessage());
      for (const info of joined.participants ?? []) if (info.sid !== joined.participant.sid) parts.set(info.sid, info);
      const iceServers = (joined.iceServers ?? []).map((x) => ({ urls: x.urls, username: x.username, credential: x.credential }));
      const config: RTCConfiguration = { ...this.rtcConfig(), iceServers: [...iceServers, ...(this.opts.iceServers ?? [])] };
      const pub = new RTCPeerConnection(config);
      const sub = new RTCPeerConnection(config);
      pc = { pub, sub };
      pub.onicecandidate = (ev) => signal.send({ type: 'trickle', target: 'publisher', candidate: ev.candidate ? ev.candidate.toJSON() : null });
      sub.onicecandidate = (ev) => signal.send({ type: 'trickle', target: 'subscriber', candidate: ev.candidate ? ev.candidate.toJSON() : null });
      sub.ontrack = (ev) => {
        // Now, not when the tracks are taken over: encoded streams must be taken before frames arrive.
        this.crypto?.attachReceiver(ev.receiver);
        tracks.push(ev);
      };
      sub.ondatachannel = (ev) => channels.push(ev.channel);
      const reliable = pub.createDataChannel('_reliable', { ordered: true });
      const lossy = pub.createDataChannel('_lossy', { ordered: false, maxRetransmits: 0 });

      // The same tracks, with the same encodings (simulcast layers, SVC mode, codec).
      const stream = new MediaStream();
      const published: LocalTrackPublication[] = [];
      for (const old of this.localTracks.values()) {
        const track = old.track;
        if (track.readyState !== 'live') continue;
        const settings = track.getSettings();
        const params = old.transceiver.sender.getParameters();
        const encodings = params.encodings ?? [];
        const layered = old.simulcast && track.kind === 'video';
        const reply = await signal.request({
          type: 'publishTrack',
          cid: track.id,
          kind: track.kind as TrackKind,
          source: old.source,
          name: old.info.name,
          muted: !track.enabled,
          width: settings.width,
          height: settings.height,
          layers: layered ? simulcastLayers(settings) : undefined,
        });
        const info = (reply as { track?: TrackInfo }).track;
        if (!info) throw new Error('move: publishTrack reply has no track');
        stream.addTrack(track);
        const several = encodings.length > 1 || encodings.some((e) => (e as { scalabilityMode?: string }).scalabilityMode);
        const transceiver = pub.addTransceiver(track, {
          direction: 'sendonly',
          streams: [stream],
          sendEncodings: several
            ? encodings.map((e) => {
                const mode = (e as { scalabilityMode?: string }).scalabilityMode;
                return {
                  rid: e.rid,
                  maxBitrate: e.maxBitrate,
                  scaleResolutionDownBy: e.scaleResolutionDownBy,
                  ...(mode ? { scalabilityMode: mode } : {}),
                } as RTCRtpEncodingParameters;
              })
            : undefined,
        });
        this.crypto?.attachSender(transceiver.sender, track.kind);
        const mime = params.codecs?.[0]?.mimeType;
        if (mime) {
          preferCodec(transceiver, track.kind, mime.replace(/^[a-z]+\//i, ''));
          if (/av1/i.test(mime)) negotiateDependencyDescriptor(transceiver);
        }
        published.push(new LocalTrackPublication(info, track, transceiver, old.simulcast, old.autoSimulcast));
      }

      // Publisher round on the new node.
      const offer = await pub.createOffer();
      await pub.setLocalDescription(offer);
      const answered = new Promise<string>((resolve) => (answerWaiter = resolve));
      const replied = signal
        .request({ type: 'offer', sdp: offer.sdp ?? '' })
        .then((m) => ('sdp' in m && typeof m.sdp === 'string' ? m.sdp : answered));
      const sdp = await Promise.race([replied, answered, sleep(MOVE_SETUP_TIMEOUT_MS).then(() => '')]);
      if (!sdp) throw new Error('move: no answer from the new node');
      answerWaiter = null;
      await pub.setRemoteDescription({ type: 'answer', sdp });
      await pubCandidates.flush();

      // Wait until the new connections carry media both ways: ours out, and
      // the video of everyone we show decoded.
      const want = new Set<string>();
      for (const p of this.participants.values()) {
        if ([...p.tracks.values()].some((t) => t.kind === 'video' && t.sfuTrack)) want.add(p.identity);
      }
      const deadline = performance.now() + MOVE_MEDIA_WAIT_MS;
      let decoded = new Set<string>();
      for (;;) {
        if (failed) throw new Error(`move: ${failed}`);
        if (this.state !== 'connected') throw new Error(`move: room is ${this.state}`);
        decoded = new Set<string>();
        const stats = await sub.getStats();
        stats.forEach((r) => {
          if (r.type !== 'inbound-rtp' || r.kind !== 'video' || !(r.framesDecoded > 0)) return;
          const m = r.mid !== undefined ? subMids.get(String(r.mid)) : undefined;
          const who = m ? parts.get(m.streamId)?.identity : undefined;
          if (who) decoded.add(who);
        });
        const sending = pub.connectionState === 'connected' || published.length === 0;
        if (sending && [...want].every((id) => decoded.has(id))) {
          await sleep(MOVE_OVERLAP_MS);
          break;
        }
        if (performance.now() > deadline) {
          if (pub.connectionState !== 'connected' && sub.connectionState !== 'connected') throw new Error('move: the new connections did not connect');
          console.info(`petrel: moving without the video of ${[...want].filter((id) => !decoded.has(id)).join(', ') || 'none missing'} decoded`);
          break;
        }
        await sleep(100);
      }
      await subQueue.run(async () => {});

      // Switch: the new session becomes the room's; then the old one leaves.
      adopted = true;
      const old = { signal: this.signal, pub: this.pub, sub: this.sub };
      this.p2p.leave('moved to another node', false, false);
      for (const t of Object.values(this.iceTimers)) clearTimeout(t);
      this.signal = signal;
      this.pub = pub;
      this.sub = sub;
      this.reliable = reliable;
      this.lossy = lossy;
      this.subMids = subMids;
      this.subRejected = subRejected;
      this.pubCandidates.clear();
      this.subCandidates.clear();
      this.orphanTracks.clear();
      this.localStream = stream;
      this.localTracks.clear();
      for (const lp of published) this.localTracks.set(lp.sid, lp);
      this.room = joined.room;
      this.localParticipant = joined.participant;
      this.resumeToken = joined.resumeToken;
      this.iceServers = iceServers;
      this.url = url;
      if (node) this.clusterNode = node;
      for (const [x, target] of [
        [pub, 'publisher'],
        [sub, 'subscriber'],
      ] as const) {
        x.onicecandidate = (ev) => this.sendTrickle(target, ev.candidate);
        x.oniceconnectionstatechange = () => this.onIceState(x, target);
      }
      this.listenData(reliable, true);
      this.listenData(lossy, false);
      for (const ch of channels) this.listenData(ch, ch.label !== '_lossy');
      sub.ondatachannel = (ev) => this.listenData(ev.channel, ev.channel.label !== '_lossy');
      sub.ontrack = (ev) => this.onTrack(ev);

      // Everyone shown becomes their session on the new node (same identity),
      // or leaves; newcomers join.
      // Of two sessions of one identity there (a mirror of someone still
      // moving, and their new session), the earlier is shown and the later
      // succeeds it when it leaves.
      const stale = new Set(this.participants.keys());
      const order = [...parts.values()].sort((a, b) => (a.joinedAt ?? 0) - (b.joinedAt ?? 0));
      for (const info of order) {
        if (info.identity === joined.participant.identity) continue;
        const shown = this.byIdentity(info.identity);
        if (shown && stale.has(shown.sid)) {
          shown.successor = info;
          this.successorOf.set(info.sid, shown);
          this.promote(shown);
        } else this.upsertParticipant(info);
      }
      for (const sid of stale) {
        const p = this.participants.get(sid);
        if (p?.successor) this.promote(p);
        else if (p) this.removeParticipant(p, 'left');
      }
      this.leftDuringMove.clear();
      for (const ev of tracks) this.onTrack(ev);
      for (const [sid, d] of demands) void this.applyDemand(sid, d.active, d.layers);

      try {
        old.signal?.send({ type: 'leave' });
      } catch {
        /* already gone */
      }
      old.signal?.close();
      old.pub?.close();
      old.sub?.close();
      console.info(`petrel: moved to ${node ?? url} (${reason}) in ${Math.round(performance.now() - t0)} ms, before leaving`);
      this.p2p.evaluate();
    } catch (err) {
      if (!adopted) abort();
      throw err;
    }
  }

  private onSignalLost(reason: string): void {
    if (this.state !== 'connected') return;
    void this.reconnect(reason);
  }

  private async reconnect(reason: string, firstDelay = 250): Promise<void> {
    this.setState('reconnecting');
    this.emit('reconnecting');
    console.info(`petrel: reconnecting (${reason})`);
    const deadline = Date.now() + (this.opts.reconnectWindowMs ?? 20_000);
    let delay = firstDelay;
    while (Date.now() < deadline && this.state === 'reconnecting') {
      await sleep(delay);
      delay = Math.max(delay, 125);
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
        // Whoever joined or left during the outage changes whether this is a 1:1 call.
        this.p2p.evaluate();
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
        // In a cluster the node itself may be gone: ask another node where to go.
        if (this.clusterNodes.length && this.clusterNode && !(err instanceof PetrelError)) {
          const next = await failover(this.clusterNodes, this.clusterNode, this.room?.name ?? tokenRoom(this.token));
          if (next && wsUrl(next.ws) !== this.url) {
            this.url = wsUrl(next.ws);
            this.clusterNode = next.node;
            this.resumeToken = ''; // another node does not know us: join anew
          }
        }
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
        // A camera whose encodings the SDK chose is left to choose again.
        await this.publishTrack(pub.track, { source: pub.source, name: pub.info.name, simulcast: pub.autoSimulcast ? undefined : pub.simulcast });
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
    this.closeCrypto();
    this.setState('disconnected');
    this.emit('disconnected', reason);
  }

  private teardown(): void {
    window.removeEventListener('online', this.onOnline);
    window.removeEventListener('pagehide', this.onPageHide);
    if (this.qualityTimer) clearInterval(this.qualityTimer);
    this.qualityTimer = null;
    for (const o of this.videoObservers.values()) o.stop();
    this.videoObservers.clear();
    const signal = this.signal;
    this.signal = null;
    signal?.close();
    this.closePeerConnections();
  }

  private closePeerConnections(): void {
    for (const t of Object.values(this.iceTimers)) clearTimeout(t);
    this.p2p.close();
    if (this.mediaPath !== 'sfu') {
      this.mediaPath = 'sfu';
      this.emit('mediaPathChanged', 'sfu', 'closed');
    }
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

// Puts mime first in the transceiver's codec list (where the browser supports
// setCodecPreferences and the codec); the answerer then picks it.
function preferCodec(t: RTCRtpTransceiver, kind: string, mime: string): void {
  const caps = RTCRtpSender.getCapabilities?.(kind)?.codecs;
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
