// Wire types of the Petrel room protocol v1 (docs/protocol.md). Kept in one file so
// a protocol change is one diff here.

export const PROTOCOL_VERSION = 1;

export type TrackKind = 'audio' | 'video';
export type TrackSource = 'camera' | 'microphone' | 'screen' | 'screen_audio' | 'unknown';
export type PcTarget = 'publisher' | 'subscriber';

export interface RoomInfo {
  sid: string;
  name: string;
  metadata: string;
  numParticipants: number;
  maxParticipants: number;
  createdAt: number;
}

export interface Permissions {
  publish: boolean;
  subscribe: boolean;
  publishData: boolean;
  admin: boolean;
  /** May start and stop the room's recording (startRecording/stopRecording). */
  record?: boolean;
}

/** A room recording (docs/recording.md, Room recording). */
export interface RoomRecording {
  id: string;
  room: string;
  start: number;
  end?: number;
  active: boolean;
  startedBy?: string;
  crashed?: boolean;
  tracks: {
    key: string;
    identity: string;
    participantSid: string;
    trackSid: string;
    kind: string;
    source?: string;
    mimeType: string;
    ranges?: { from: number; to: number }[];
  }[];
}

// One simulcast encoding; RIDs q, h, f from low to full resolution.
export interface LayerInfo {
  rid: 'q' | 'h' | 'f';
  width?: number;
  height?: number;
  maxBitrate?: number;
}

export type VideoQuality = 'low' | 'medium' | 'high';

export interface TrackInfo {
  sid: string;
  cid: string;
  kind: TrackKind;
  source: TrackSource;
  name: string;
  mimeType: string;
  muted: boolean;
  width: number;
  height: number;
  ssrc?: number;
  simulcast: boolean;
  layers?: LayerInfo[];
}

export interface ParticipantInfo {
  sid: string;
  identity: string;
  name: string;
  metadata: string;
  joinedAt: number;
  permissions: Permissions;
  tracks: TrackInfo[] | null;
}

export interface IceServerInfo {
  urls: string | string[];
  username?: string;
  credential?: string;
}

// Messages the client sends. `id` is added by the signal client for requests.
export type ClientMessage =
  | {
      type: 'join';
      token: string;
      protocol: number;
      metadata?: string;
      name?: string;
      autoSubscribe?: boolean;
      resume?: { participantSid: string; resumeToken: string };
    }
  | { type: 'offer'; sdp: string }
  | { type: 'answer'; sdp: string }
  | { type: 'trickle'; target: PcTarget; candidate: RTCIceCandidateInit | null }
  | {
      type: 'publishTrack';
      cid: string;
      kind: TrackKind;
      source: TrackSource;
      name?: string;
      muted?: boolean;
      width?: number;
      height?: number;
      layers?: LayerInfo[];
    }
  | { type: 'unpublishTrack'; trackSid: string }
  | {
      type: 'updateTrackSettings';
      trackSid: string;
      width?: number;
      height?: number;
      quality?: VideoQuality;
      paused?: boolean;
    }
  | { type: 'muteTrack'; trackSid: string; muted: boolean }
  | { type: 'subscribe'; trackSids: string[]; subscribe: boolean }
  | { type: 'setLastN'; n: number }
  | { type: 'pin'; participantSids: string[] }
  | { type: 'setMaxBitrate'; bitrate: number }
  | { type: 'updateMetadata'; metadata?: string; name?: string }
  | { type: 'restartIce' }
  | { type: 'startRecording' }
  | { type: 'stopRecording' }
  | { type: 'relay'; to: string; data: unknown }
  | { type: 'ping'; t?: number }
  | { type: 'leave' };

export interface JoinedMessage {
  type: 'joined';
  protocol: number;
  room: RoomInfo;
  participant: ParticipantInfo;
  participants: ParticipantInfo[] | null;
  iceServers: IceServerInfo[] | null;
  resumeToken: string;
  resumed: boolean;
}

export type ServerMessage =
  | JoinedMessage
  | { type: 'answer'; id?: number; sdp: string }
  | { type: 'offer'; sdp: string }
  | { type: 'trickle'; target: PcTarget; candidate: RTCIceCandidateInit | null }
  | { type: 'participantJoined'; participant: ParticipantInfo }
  | { type: 'participantLeft'; participantSid: string; identity: string; reason: string }
  | { type: 'participantUpdated'; participant: ParticipantInfo }
  | { type: 'trackPublished'; participantSid: string; track: TrackInfo }
  | { type: 'trackUnpublished'; participantSid: string; trackSid: string }
  | { type: 'trackMuted'; participantSid: string; trackSid: string; muted: boolean }
  | { type: 'dominantSpeaker'; participantSid: string }
  | { type: 'trackDemand'; trackSid: string; active: boolean; layers?: boolean[] }
  | { type: 'trackSubscribed'; participantSid: string; trackSid: string; mid?: string }
  | { type: 'trackUnsubscribed'; participantSid: string; trackSid: string }
  | { type: 'relay'; from: string; data: unknown }
  | { type: 'response'; id: number; track?: TrackInfo; [k: string]: unknown }
  | { type: 'error'; id?: number; code: string; message: string }
  | { type: 'pong'; t?: number; serverTime: number }
  | { type: 'leave'; reason: string; message: string }
  | { type: 'reconnect'; url: string; node?: string; reason?: string }
  | { type: 'move'; room: string; token: string };

// Error codes after which the server closes the socket: retrying the same join
// cannot succeed, so the SDK gives up instead of reconnecting.
export const FATAL_CODES = new Set([
  'protocol_version',
  'message_too_large',
  'unauthorized',
  'token_expired',
  'room_full',
  'not_joined',
  'join_timeout',
]);

export class PetrelError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(`${code}: ${message}`);
    this.name = 'PetrelError';
  }
}
