// The connection side of a room (Room in room.ts is this plus membership and the
// public API): the current session (session.ts: signaling and both transports),
// remote media shown from the SFU or the direct 1:1 path (p2p.ts), moves to
// another node (move.ts) and reconnection (reconnect.ts), wired together.
import { decodeData } from './data.js';
import { Emitter } from './emitter.js';
import { type ClientMessage, type JoinedMessage, type ParticipantInfo, type RoomInfo, type ServerMessage, PROTOCOL_VERSION } from './protocol.js';
import { type ClusterNode, failover, tokenRoom } from './cluster.js';
import { type ConnectionQuality, type StatsSummary, StatsCollector } from './stats.js';
import type { E2EE, E2EEState } from './e2ee.js';
import type { VideoObserver } from './observe.js';
import { DirectMode } from './p2p.js';
import { Members } from './members.js';
import { Session, type SessionHandlers } from './session.js';
import { applyDemand } from './publisher.js';
import { type Adoption, type MoveHost, iceServersOf, moveBeforeBreak } from './move.js';
import { RECONNECT_WINDOW_MS, reconnectLoop } from './reconnect.js';
import type {
  ConnectOptions,
  ConnectionState,
  LocalTrackPublication,
  MediaPath,
  PublishOptions,
  RemoteParticipant,
  RemoteTrackPublication,
  RoomEvents,
} from './roomtypes.js';

const textDecoder = new TextDecoder();
const textEncoder = new TextEncoder();

export abstract class RoomConnection extends Emitter<RoomEvents> {
  state: ConnectionState = 'disconnected';
  room?: RoomInfo;
  localParticipant?: ParticipantInfo;
  readonly localTracks = new Map<string, LocalTrackPublication>();
  quality: ConnectionQuality = 'unknown';
  /** Where camera and microphone travel now (see ConnectOptions.p2p). */
  mediaPath: MediaPath = 'sfu';

  protected members = new Members({
    emit: (event, ...args) => this.emit(event, ...args),
    localIdentity: () => this.localParticipant?.identity,
    attach: (pub, p, track) => this.attachTrack(pub, p, track),
  });
  readonly participants: Map<string, RemoteParticipant> = this.members.participants;
  protected url = '';
  protected token = '';
  protected opts: ConnectOptions = {};
  protected resumeToken = '';
  // Cluster placement (ConnectOptions.cluster): the nodes known at connect and
  // the one this room is on.
  protected clusterNodes: ClusterNode[] = [];
  protected clusterNode = '';
  protected iceServers: RTCIceServer[] = [];
  protected session: Session = this.newSession();
  protected stats = new StatsCollector();
  protected qualityTimer: ReturnType<typeof setInterval> | null = null;
  protected videoObservers = new Map<HTMLElement, VideoObserver>();
  protected crypto: E2EE | null = null;
  // The receiver each remote track arrived on, and what each receiver shows now.
  protected receiverOf = new WeakMap<MediaStreamTrack, RTCRtpReceiver>();
  protected shownBy = new Map<number, { pub: RemoteTrackPublication; p: RemoteParticipant }>();
  protected p2p = new DirectMode({
    allowed: () => this.opts.p2p !== false && !this.crypto,
    connected: () => this.state === 'connected',
    localSid: () => this.localParticipant?.sid,
    participants: this.participants,
    localTracks: this.localTracks,
    rtcConfig: () => this.rtcConfig(),
    relay: (to, data) => void this.session.request({ type: 'relay', to, data }).catch(() => {}),
    pathChanged: (path, reason) => this.setMediaPath(path, reason),
  });

  // Closing the tab is leaving: tell the server now, so that the others do not
  // look at a frozen tile for the whole resume window.
  protected onPageHide = (): void => {
    void this.disconnect();
  };

  // Back online after an outage: the old ICE paths are likely gone.
  protected onOnline = (): void => {
    if (this.state === 'connected') this.restartIce();
  };

  abstract disconnect(): Promise<void>;
  abstract restartIce(): void;
  abstract getStats(): Promise<StatsSummary>;
  abstract publishTrack(track: MediaStreamTrack, opts?: PublishOptions): Promise<LocalTrackPublication>;
  protected abstract onMessage(msg: ServerMessage): void;

  // ---- session ------------------------------------------------------------------

  protected request(what: string, msg: ClientMessage): Promise<ServerMessage> {
    if (!this.session.hasSignal) return Promise.reject(new Error(`${what}: not connected`));
    return this.session.request(msg);
  }

  // A session wired to this room's encryption; the room hears its messages once it is the room's.
  protected newSession(h?: SessionHandlers): Session {
    const s: Session = new Session(h ?? this.handlersFor(() => s), () => this.state === 'connected' && this.session === s);
    s.onTransports = (pub, sub) => {
      pub.onSender = (sender, kind) => this.crypto?.attachSender(sender, kind);
      sub.onReceiver = (receiver) => this.crypto?.attachReceiver(receiver);
    };
    return s;
  }

  protected handlersFor(s: () => Session): SessionHandlers {
    return {
      message: (msg) => {
        if (this.session === s()) this.onMessage(msg);
      },
      lost: (reason) => {
        if (this.session === s() && this.state === 'connected') void this.reconnect(reason);
      },
      subscriberFailed: (err) => console.error('petrel: subscriber negotiation failed', err),
    };
  }

  // The join request, for this node (with a resume) or the node a move goes to.
  protected joinMessage(resume?: { participantSid: string; resumeToken: string }): Extract<ClientMessage, { type: 'join' }> {
    const o = this.opts;
    return { type: 'join', token: this.token, protocol: PROTOCOL_VERSION, name: o.name, metadata: o.metadata, autoSubscribe: o.autoSubscribe ?? true, resume };
  }

  protected async startSession(joined: JoinedMessage): Promise<void> {
    this.applyJoined(joined);
    this.crypto?.setIdentity(joined.participant.identity);
    this.session.createTransports(this.rtcConfig());
    this.attachTransports(this.session);
    await this.session.publisher?.negotiate();
  }

  protected applyJoined(joined: JoinedMessage): void {
    this.room = joined.room;
    this.localParticipant = joined.participant;
    this.resumeToken = joined.resumeToken;
    this.iceServers = iceServersOf(joined);
    this.members.reconcile(joined.participants ?? [], joined.participant.sid);
  }

  // Data and remote tracks of the session's transports come to the room.
  protected attachTransports(s: Session): void {
    const pub = s.publisher;
    const sub = s.subscriber;
    if (!pub || !sub) return;
    this.listenData(pub.reliable, true);
    this.listenData(pub.lossy, false);
    sub.attach({
      channel: (ch) => this.listenData(ch, ch.label !== '_lossy'),
      track: (ev) => {
        if (this.crypto) this.receiverOf.set(ev.track, ev.receiver);
        const mid = ev.transceiver.mid;
        const m = mid !== null ? sub.mids.get(mid) : undefined;
        this.members.trackArrived(m?.streamId ?? ev.streams[0]?.id ?? '', m?.trackId ?? ev.track.id, ev.track);
      },
      unsupported: (mid) => {
        const m = sub.mids.get(mid);
        const p = m && this.participants.get(m.streamId);
        const pub = m && p?.tracks.get(m.trackId);
        console.warn(`petrel: cannot decode the codec of track ${m?.trackId ?? `in section ${mid}`}: not receiving it`);
        if (!p || !pub) return;
        pub.unsupported = 'codec_unsupported';
        this.emit('trackUnsupported', pub, p, 'codec_unsupported');
      },
    });
  }

  protected rtcConfig(iceServers = this.iceServers): RTCConfiguration {
    return {
      iceServers: [...iceServers, ...(this.opts.iceServers ?? [])],
      iceTransportPolicy: this.opts.iceTransportPolicy ?? 'all',
      bundlePolicy: 'max-bundle',
      // Chromium's encoded streams work only on connections made with this.
      ...(this.crypto?.needsInsertableStreams ? { encodedInsertableStreams: true } : {}),
    } as RTCConfiguration;
  }

  // ---- remote tracks ------------------------------------------------------------

  protected attachTrack(pub: RemoteTrackPublication, p: RemoteParticipant, track: MediaStreamTrack): void {
    const receiver = this.receiverOf.get(track);
    if (this.crypto && receiver) this.shownBy.set(this.crypto.bind(receiver, p.identity), { pub, p });
    pub.sfuTrack = track;
    pub.subscribed = true;
    this.showTrack(pub, p);
  }

  // Points the publication at the track its media comes on now (SFU or direct)
  // and tells the page when that changes.
  protected showTrack(pub: RemoteTrackPublication, p: RemoteParticipant): void {
    const track = this.p2p.remoteTrack(p, pub) ?? pub.sfuTrack;
    // A reused transceiver brings the same track object for a new publication.
    if (!track || pub.track === track) return;
    pub.track = track;
    this.emit('trackSubscribed', track, pub, p);
  }

  protected setMediaPath(path: MediaPath, reason: string): void {
    const changed = this.mediaPath !== path;
    this.mediaPath = path;
    // Tiles follow: the peer's camera and microphone from the path in use.
    for (const p of this.participants.values()) for (const pub of p.tracks.values()) this.showTrack(pub, p);
    if (changed) {
      console.info(`petrel: media path ${path} (${reason})`);
      this.emit('mediaPathChanged', path, reason);
    }
  }

  protected onE2EEState(rid: number, state: E2EEState): void {
    const shown = this.shownBy.get(rid);
    if (!shown) return;
    shown.pub.e2eeState = state;
    this.emit('e2eeStateChanged', shown.pub, this.participants.get(shown.pub.participantSid) ?? shown.p, state);
  }

  protected closeCrypto(): void {
    this.crypto?.close();
    this.crypto = null;
    this.shownBy.clear();
  }

  protected listenData(dc: RTCDataChannel, reliable: boolean): void {
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

  // ---- moves and reconnection ---------------------------------------------------

  // The server asks us to move to another node (move.ts). Others see our new
  // session as the successor of the old one (same tile). If the new node cannot
  // be joined, the old way: leave, then join.
  protected moveTo(url: string, node: string | undefined, reason: string): void {
    if (this.state !== 'connected' || typeof url !== 'string' || !url || this.members.isMoving) return;
    this.members.startMove();
    moveBeforeBreak(this.moveHost(), wsUrl(url), node, reason)
      .catch((err) => {
        console.warn(`petrel: could not move to ${url} before leaving; leaving, then joining`, err);
        if (this.state !== 'connected') return;
        this.members.endMove();
        this.leaveAndJoin(url, node, reason);
      })
      .finally(() => this.members.endMove());
  }

  protected moveHost(): MoveHost {
    return {
      connected: () => this.state === 'connected',
      state: () => this.state,
      joinMessage: () => this.joinMessage(),
      rtcConfig: (iceServers) => this.rtcConfig(iceServers),
      newSession: (h) => this.newSession(h),
      localTracks: this.localTracks,
      shownVideo: () => {
        const want = new Set<string>();
        for (const p of this.participants.values()) if ([...p.tracks.values()].some((t) => t.kind === 'video' && t.sfuTrack)) want.add(p.identity);
        return want;
      },
      adopt: (a) => this.adopt(a),
    };
  }

  // The switch of a move: the new session becomes the room's; then the old one leaves.
  protected adopt(a: Adoption): void {
    const old = this.session;
    this.p2p.leave('moved to another node', false, false);
    this.session = a.session;
    a.session.setHandlers(this.handlersFor(() => a.session));
    this.localTracks.clear();
    for (const lp of a.published) this.localTracks.set(lp.sid, lp);
    this.room = a.joined.room;
    this.localParticipant = a.joined.participant;
    this.resumeToken = a.joined.resumeToken;
    this.iceServers = a.iceServers;
    this.url = a.url;
    if (a.node) this.clusterNode = a.node;
    this.members.adoptNode(a.view.parts.values(), a.joined.participant.identity);
    this.attachTransports(a.session);
    for (const [sid, d] of a.view.demands) {
      const lp = this.localTracks.get(sid);
      if (lp) void applyDemand(lp, d.active, d.layers);
    }
    old.leave();
    old.close();
    this.p2p.evaluate();
  }

  // The server moved us to another room: join it anew with its token (a new
  // participant there), and publish the same local tracks. The server closes
  // this session; its socket's close finds us reconnecting and is ignored.
  protected moveRoom(room: string, token: string): void {
    if (this.state !== 'connected' || typeof token !== 'string' || !token) return;
    this.token = token;
    this.resumeToken = '';
    this.session.closeSignal();
    this.emit('roomMoved', room);
    void this.reconnect(`moved to room ${room}`, 0);
  }

  protected leaveAndJoin(url: string, node: string | undefined, reason: string): void {
    this.session.leave();
    this.session.closeSignal();
    this.url = wsUrl(url);
    if (node) this.clusterNode = node;
    this.resumeToken = '';
    // At once: the new node is up and waiting, and others see us frozen meanwhile.
    void this.reconnect(`moved to another node (${reason})`, 0);
  }

  protected async reconnect(reason: string, firstDelay?: number): Promise<void> {
    this.setState('reconnecting');
    this.emit('reconnecting');
    console.info(`petrel: reconnecting (${reason})`);
    await reconnectLoop(
      {
        windowMs: this.opts.reconnectWindowMs ?? RECONNECT_WINDOW_MS,
        reconnecting: () => this.state === 'reconnecting',
        attempt: () => this.resume(),
        forgetResume: () => (this.resumeToken = ''),
        finish: (why) => this.finish(why),
        failover: () => this.failover(),
      },
      firstDelay,
    );
  }

  // One reconnect attempt: resume (same connections, new ICE paths), or, when the
  // server no longer knows us, join as a new participant.
  protected async resume(): Promise<void> {
    const resume = this.resumeToken ? { participantSid: this.localParticipant?.sid ?? '', resumeToken: this.resumeToken } : undefined;
    const joined = await this.session.join(this.url, this.joinMessage(resume));
    if (joined.resumed) {
      this.applyJoined(joined);
      // Fresh TURN credentials for the restart: the old ones may have expired.
      this.session.setConfiguration(this.rtcConfig());
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
  }

  // In a cluster the node itself may be gone: ask another node where to go.
  protected async failover(): Promise<void> {
    if (!this.clusterNodes.length || !this.clusterNode) return;
    const next = await failover(this.clusterNodes, this.clusterNode, this.room?.name ?? tokenRoom(this.token));
    if (next && wsUrl(next.ws) !== this.url) {
      this.url = wsUrl(next.ws);
      this.clusterNode = next.node;
      this.resumeToken = ''; // another node does not know us: join anew
    }
  }

  // The server no longer knew us (resume window passed): we are a new participant,
  // so build fresh connections and publish the same local tracks again.
  protected async rejoin(joined: JoinedMessage): Promise<void> {
    this.members.dropSubscriptions();
    const old = [...this.localTracks.values()];
    this.localTracks.clear();
    for (const pub of old) this.emit('localTrackUnpublished', pub);
    this.closeTransports();
    await this.startSession(joined);
    for (const pub of old) {
      if (pub.track.readyState === 'live') {
        // A camera whose encodings the SDK chose is left to choose again.
        await this.publishTrack(pub.track, { source: pub.source, name: pub.info.name, simulcast: pub.autoSimulcast ? undefined : pub.simulcast });
      }
    }
  }

  // ---- teardown -----------------------------------------------------------------

  protected finish(reason: string): void {
    if (this.state === 'disconnected') return;
    for (const pub of this.localTracks.values()) pub.track.stop();
    this.localTracks.clear();
    this.members.clear();
    this.teardown();
    this.closeCrypto();
    this.setState('disconnected');
    this.emit('disconnected', reason);
  }

  protected teardown(): void {
    window.removeEventListener('online', this.onOnline);
    window.removeEventListener('pagehide', this.onPageHide);
    if (this.qualityTimer) clearInterval(this.qualityTimer);
    this.qualityTimer = null;
    for (const o of this.videoObservers.values()) o.stop();
    this.videoObservers.clear();
    this.session.closeSignal();
    this.closeTransports();
    this.session.close();
  }

  protected closeTransports(): void {
    this.p2p.close();
    if (this.mediaPath !== 'sfu') {
      this.mediaPath = 'sfu';
      this.emit('mediaPathChanged', 'sfu', 'closed');
    }
    this.session.closeTransports();
    this.members.clearOrphans();
  }

  protected setState(state: ConnectionState): void {
    if (this.state === state) return;
    this.state = state;
    this.emit('connectionStateChanged', state);
  }

  protected startQualityTimer(): void {
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
