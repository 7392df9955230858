// Petrel browser SDK: join a Petrel room (protocol v1), publish and subscribe to
// media, exchange data messages. See docs/protocol.md for the wire protocol.
export {
  Room,
  RemoteParticipant,
  RemoteTrackPublication,
  LocalTrackPublication,
  wsUrl,
  type ConnectOptions,
  type ConnectionState,
  type MediaPath,
  type DataMessage,
  type PublishOptions,
  type RoomEvents,
  type SendDataOptions,
  type TrackSettings,
} from './room.js';
export type { ConnectionQuality, StatsSummary, TrackStats, CandidatePairStats } from './stats.js';
export { encodeData, decodeData, type DataHeader } from './data.js';
export {
  PetrelError,
  PROTOCOL_VERSION,
  type ParticipantInfo,
  type RoomInfo,
  type TrackInfo,
  type TrackKind,
  type TrackSource,
  type LayerInfo,
  type VideoQuality,
} from './protocol.js';
