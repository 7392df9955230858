// The Petrel room protocol v1 (docs/protocol.md). The wire types are generated
// from the server's Go types into protocol.gen.ts (go generate ./protocol);
// this file re-exports them under the SDK's names and keeps what is not a wire type.

export const PROTOCOL_VERSION = 1;

export type {
  ClientMessage,
  ServerMessage,
  Joined as JoinedMessage,
  RoomInfo,
  Grants as Permissions,
  RoomRecording,
  RoomTrackInfo,
  LayerInfo,
  LayerRID,
  TrackInfo,
  ParticipantInfo,
  ICEServer as IceServerInfo,
  TrackKind,
  TrackSource,
  PcTarget,
  VideoQuality,
} from './protocol.gen.js';

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
