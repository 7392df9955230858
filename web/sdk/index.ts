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
export { qualityOf } from './stats.js';
export { encodeData, decodeData, type DataHeader } from './data.js';
// Direct sessions with WebRTC cameras, falling back to the SFU: docs/cameras.md#direct-sessions.
export { viewCamera, type CameraView, type CameraPath, type ViewCameraOptions, type DirectStep } from './direct.js';
// WHEP playback that does not wait for ICE gathering, and the browser's receive codecs.
export { whepPlay, whepIceServers, WhepError, receivesOverWebRTC, receiveCodecs, type WhepOptions, type WhepSession, type WhepStep } from './whep.js';
export { placeParticipant, clusterNodes, measureNodes, type ClusterNode, type Placement } from './cluster.js';
export {
  PetrelError,
  PROTOCOL_VERSION,
  type ParticipantInfo,
  type RoomInfo,
  type RoomRecording,
  type TrackInfo,
  type TrackKind,
  type TrackSource,
  type LayerInfo,
  type VideoQuality,
} from './protocol.js';
// WebTransport media path (MoQT over WebTransport, WebCodecs): docs/webtransport.md.
export { WtSession, wtEndpoint, type WtConnectOptions, type WtEvents, type WtParticipant, type WtStats, type WtSubscription, type WtTrackInfo, type WtDataMessage } from './wt.js';
export { WtLocalTrack, type WtPublishOptions, type WtLocalStats } from './wtlocal.js';
export { WtRemoteTrack, type WtRemoteStats } from './wtremote.js';
export type { WtMode } from './wtcarrier.js';
export { webTransportMediaSupported } from './wtmedia.js';
export { type SvcCodec, SVC_MODE } from './svc.js';
// End-to-end encryption (SFrame in encoded transforms): docs/e2ee.md.
export { E2EE, e2eeSupported, type E2EEOptions, type E2EEState, type E2EEStats } from './e2ee.js';
