// The public types of a room session: options, publications, participants and
// the events a Room emits. Room (room.ts) re-exports them.
import { TaskQueue } from './negotiation.js';
import type { ParticipantInfo, TrackInfo, TrackKind, TrackSource, VideoQuality } from './protocol.js';
import type { SvcCodec } from './svc.js';
import type { ConnectionQuality, StatsSummary } from './stats.js';
import type { E2EEOptions, E2EEState } from './e2ee.js';

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
  /**
   * With exactly two participants, send camera and microphone over a direct
   * peer-to-peer connection while the SFU connections stay up and idle (default true).
   */
  p2p?: boolean;
  /**
   * Cluster placement (cluster.ts): join the node the cluster picks from this
   * client's measured round trips, and on losing it ask another node where to
   * go. Harmless against a single server (default false).
   */
  cluster?: boolean;
  /**
   * End-to-end encryption (docs/e2ee.md): every frame this participant sends is
   * encrypted with SFrame in the browser, and others' frames are decrypted with
   * the same passphrase or the application's keys. The server forwards what it
   * cannot read. A 1:1 call then stays on the server (no p2p).
   */
  e2ee?: E2EEOptions;
}

/** Where camera and microphone travel: through the server, or directly to the one other participant. */
export type MediaPath = 'sfu' | 'p2p';

export interface PublishOptions {
  source?: TrackSource;
  name?: string;
  /**
   * Send three resolutions (full, 1/2, 1/4) so each subscriber gets what fits. Video
   * only. Default: on when the room has more than two participants at publish time
   * (in a 1:1 call the only viewer gets the full layer anyway). When the option is
   * left out and the room grows past two, a single-layer camera is republished with
   * simulcast (make before break: the old publication goes once the new one is
   * received, so viewers keep seeing video).
   */
  simulcast?: boolean;
  /**
   * Preferred codec mime type, e.g. 'audio/PCMU' for a camera loudspeaker that
   * takes only G.711 (the browser encodes it, nobody transcodes). Other codecs
   * stay as fallbacks in the offer.
   */
  codec?: string;
  /**
   * Publish a camera as one scalable encoding (L3T3_KEY: three spatial and three
   * temporal layers) in VP9 or AV1 instead of simulcast; the server forwards each
   * viewer the layers it needs. Off by default: simulcast VP8 costs the
   * publisher less CPU. Falls back to simulcast where the browser lacks the codec.
   */
  svc?: SvcCodec;
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
  /** The media to show: from the subscriber connection, or the direct one while mediaPath is 'p2p'. */
  track?: MediaStreamTrack;
  /** The track as it arrives on the subscriber connection (the SFU path). */
  sfuTrack?: MediaStreamTrack;
  subscribed = false;
  /** With end-to-end encryption: whether this track's frames decrypt (see the e2eeStateChanged event). */
  e2eeState?: E2EEState;
  /** 'codec_unsupported': this browser cannot decode the track's codec, so it is not received (see trackUnsupported). */
  unsupported?: 'codec_unsupported';
  constructor(
    public info: TrackInfo,
    /** Changes when the participant moves to another node (participantMoved). */
    public participantSid: string,
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
  /** @internal resolves waiters for the first demand that asks for media */
  demandWaiters: (() => void)[] = [];
  constructor(
    public info: TrackInfo,
    readonly track: MediaStreamTrack,
    readonly transceiver: RTCRtpTransceiver,
    /** Sent as several encodings (simulcast). */
    readonly simulcast = false,
    /** @internal simulcast was left to the SDK (by room size), so it may turn it on later */
    readonly autoSimulcast = false,
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
  /** @internal the same identity's new session (it moves to another node), shown when this one leaves */
  successor?: ParticipantInfo;
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
  /**
   * The server's audio mixer in an audio-mixed room, not a person: its one
   * audio track is everything this client hears of the others (minus its own
   * voice), to be played and not shown as a participant.
   */
  get audioMix(): boolean {
    return this.info.identity.startsWith('audiomix-');
  }
}

export interface RoomEvents {
  /** Also emitted, right after connect, for everyone already in the room. */
  participantJoined: (p: RemoteParticipant) => void;
  participantLeft: (p: RemoteParticipant, reason: string) => void;
  participantUpdated: (p: RemoteParticipant) => void;
  /**
   * The participant's session moved (another node, or we moved): same person,
   * same object and publications, a new sid (was `oldSid`). Tiles keyed by sid
   * take the new one; their tracks follow by trackSubscribed.
   */
  participantMoved: (p: RemoteParticipant, oldSid: string) => void;
  trackPublished: (pub: RemoteTrackPublication, p: RemoteParticipant) => void;
  trackUnpublished: (pub: RemoteTrackPublication, p: RemoteParticipant) => void;
  trackMuted: (pub: RemoteTrackPublication, p: RemoteParticipant, muted: boolean) => void;
  trackSubscribed: (track: MediaStreamTrack, pub: RemoteTrackPublication, p: RemoteParticipant | undefined) => void;
  trackUnsubscribed: (track: MediaStreamTrack, pub: RemoteTrackPublication, p: RemoteParticipant | undefined) => void;
  /**
   * This browser cannot decode the track's codec (e.g. H.264 High on a browser with
   * Baseline and Main only): its media section is declined, the other tracks play.
   */
  trackUnsupported: (pub: RemoteTrackPublication, p: RemoteParticipant, code: 'codec_unsupported') => void;
  localTrackPublished: (pub: LocalTrackPublication) => void;
  localTrackUnpublished: (pub: LocalTrackPublication) => void;
  dataReceived: (msg: DataMessage) => void;
  /** The room's dominant speaker changed; `sid` may be our own participant sid. */
  dominantSpeakerChanged: (sid: string, p: RemoteParticipant | undefined) => void;
  connectionQuality: (quality: ConnectionQuality, stats: StatsSummary) => void;
  connectionStateChanged: (state: ConnectionState) => void;
  /** Camera and microphone moved to the direct connection ('p2p') or back to the server ('sfu'). */
  mediaPathChanged: (path: MediaPath, reason: string) => void;
  /** A relay message from another participant (direct-session signaling, e.g. direct.ts). */
  relayReceived: (fromSid: string, data: unknown) => void;
  /** End-to-end encryption: a remote track's frames started or stopped decrypting ('decrypt_failed': wrong key). */
  e2eeStateChanged: (pub: RemoteTrackPublication, p: RemoteParticipant | undefined, state: E2EEState) => void;
  reconnecting: () => void;
  reconnected: () => void;
  /**
   * An administrator moved us to another room (server API): the SDK joins it
   * with the token the server sent and publishes the same tracks; `reconnected`
   * follows, with the new room's participants.
   */
  roomMoved: (room: string) => void;
  disconnected: (reason: string) => void;
}
