// Direct sessions with WebRTC cameras (docs/cameras.md#direct-sessions): the
// viewer, connected to the camera's room, offers to the camera through relay
// messages, trickling its ICE candidates after the offer as they are gathered
// (the camera answers at once and trickles its own), and receives its video
// on a peer connection of its own — peer to peer where the network allows,
// else through the server's TURN. When the camera refuses (its direct-session
// limit) or nothing connects in time, the viewer subscribes to the camera
// through the SFU instead, on the room's connections.
import { gathered, type Room, type RemoteParticipant } from './room.js';
import { PetrelError } from './protocol.js';
import { receivesOverWebRTC } from './whep.js';

/** Where a camera's media comes from. */
export type CameraPath = 'direct' | 'sfu';

export interface ViewCameraOptions {
  /** Try a direct session first (default true); false goes straight to the SFU. */
  direct?: boolean;
  /** How long the direct path may take to deliver video before falling back (ms, default 4000). */
  timeoutMs?: number;
  /** Fall back to the SFU when the direct path fails (default true); false rejects instead. */
  fallback?: boolean;
  /** ICE transport policy of the direct connection (default: the room's). 'relay' goes through the server's TURN. */
  iceTransportPolicy?: RTCIceTransportPolicy;
  /** Steps as they happen, in ms since viewCamera was called. */
  onStep?: (step: DirectStep, ms: number) => void;
  /**
   * Trickle ICE (default true): the offer goes at once and candidates follow
   * as relay messages. false gathers every candidate into the offer first.
   */
  trickle?: boolean;
}

export type DirectStep = 'pcCreated' | 'offerCreated' | 'answerArrived' | 'iceConnected' | 'dtlsConnected' | 'firstTrack';

export interface CameraView {
  path: CameraPath;
  /** Why the direct path was not taken (path 'sfu'). */
  reason?: string;
  video: MediaStreamTrack;
  audio?: MediaStreamTrack;
  /** The direct peer connection (path 'direct'). */
  pc?: RTCPeerConnection;
  /** Steps of the direct attempt, ms since viewCamera was called. */
  steps: Partial<Record<DirectStep, number>>;
  /** The camera's own steps of the direct session (ms since the offer reached it), once it reports them. */
  cameraSteps?: Record<string, number>;
  /**
   * Talk-back on the direct connection: the track goes to the camera's
   * loudspeaker (null stops). Path 'sfu' uses the talk topic instead (ptzui.ts).
   */
  talk(track: MediaStreamTrack | null): Promise<void>;
  close(): void;
}

interface DirectSignal {
  direct: 'offer' | 'answer' | 'bye' | 'timing' | 'candidate' | 'error';
  session: string;
  sdp?: string;
  reason?: string;
  stepsMs?: Record<string, number>;
  /** A trickled candidate; end: true says there are no more. */
  candidate?: RTCIceCandidateInit;
  end?: boolean;
}

/** Why a trickled candidate from the network is refused (undefined: it is fine). */
export function badCandidate(c: unknown): string | undefined {
  if (!c || typeof c !== 'object') return 'no candidate';
  const { candidate, sdpMid, sdpMLineIndex } = c as RTCIceCandidateInit;
  if (typeof candidate !== 'string') return 'candidate is not a string';
  if (candidate.length > 512) return `candidate of ${candidate.length} bytes`;
  if (candidate !== '' && !candidate.startsWith('candidate:')) return 'not an ICE candidate';
  if (/[\r\n\0]/.test(candidate)) return 'candidate with a line break';
  if (sdpMid != null && (typeof sdpMid !== 'string' || sdpMid.length > 32)) return 'bad sdpMid';
  if (sdpMLineIndex != null && (typeof sdpMLineIndex !== 'number' || sdpMLineIndex < 0 || sdpMLineIndex > 16)) return 'bad sdpMLineIndex';
  return undefined;
}

const CAMERA_IDENTITY = 'camera';

function cameraOf(room: Room): RemoteParticipant | undefined {
  return [...room.participants.values()].find((p) => p.identity === CAMERA_IDENTITY);
}

/**
 * Shows the camera of a camera room (`camera/<id>`, joined with
 * `autoSubscribe: false, p2p: false`): directly when it can, else through the SFU.
 */
export async function viewCamera(room: Room, opts: ViewCameraOptions = {}): Promise<CameraView> {
  const start = performance.now();
  const steps: Partial<Record<DirectStep, number>> = {};
  const mark = (s: DirectStep) => {
    if (steps[s] !== undefined) return;
    steps[s] = Math.round((performance.now() - start) * 10) / 10;
    opts.onStep?.(s, steps[s] as number);
  };
  const cam = cameraOf(room);
  if (!cam) throw new Error('viewCamera: no camera in the room');
  let reason = 'direct sessions not asked for';
  if (opts.direct !== false) {
    try {
      return await openDirect(room, cam, opts, steps, mark);
    } catch (err) {
      reason = err instanceof Error ? err.message : String(err);
      if (opts.fallback === false) throw err;
      console.info(`petrel: camera through the SFU: ${reason}`);
    }
  }
  return viaSFU(room, cam, reason, steps);
}

async function openDirect(
  room: Room,
  cam: RemoteParticipant,
  opts: ViewCameraOptions,
  steps: Partial<Record<DirectStep, number>>,
  mark: (s: DirectStep) => void,
): Promise<CameraView> {
  const session = Math.random().toString(36).slice(2, 12);
  const cfg = room.rtcConfiguration;
  const pc = new RTCPeerConnection({ ...cfg, iceTransportPolicy: opts.iceTransportPolicy ?? cfg.iceTransportPolicy });
  mark('pcCreated');
  pc.addTransceiver('video', { direction: 'recvonly' });
  // sendrecv from the start: talk-back later is a replaceTrack, no renegotiation.
  const audioTx = pc.addTransceiver('audio', { direction: 'sendrecv' });
  let video: MediaStreamTrack | undefined;
  let audio: MediaStreamTrack | undefined;
  let cameraSteps: Record<string, number> | undefined;
  let onSignal: ((s: DirectSignal) => void) | undefined;
  const trickle = opts.trickle !== false;
  // The camera's candidates wait for its answer to be applied.
  let remoteSet = false;
  const early: RTCIceCandidateInit[] = [];
  const addRemote = (c: RTCIceCandidateInit) => {
    pc.addIceCandidate(c).catch((err) => {
      console.warn(`petrel: direct session: the camera's candidate refused: ${err}`);
      void room.relay(cam.sid, { direct: 'error', session, reason: `candidate refused: ${err}` }).catch(() => {});
    });
  };
  const listener = (from: string, data: unknown) => {
    const s = data as DirectSignal;
    if (from !== cam.sid || !s || typeof s !== 'object' || s.session !== session) return;
    if (s.direct === 'timing') cameraSteps = s.stepsMs;
    if (s.direct === 'error') console.warn(`petrel: direct session: the camera says ${s.reason}`);
    if (s.direct === 'candidate' && !s.end) {
      const bad = badCandidate(s.candidate);
      if (bad) {
        console.warn(`petrel: direct session: the camera's candidate refused: ${bad}`);
        void room.relay(cam.sid, { direct: 'error', session, reason: `candidate refused: ${bad}` }).catch(() => {});
      } else if (s.candidate?.candidate) {
        if (remoteSet) addRemote(s.candidate);
        else if (early.length < 32) early.push(s.candidate);
      }
    }
    onSignal?.(s);
  };
  room.on('relayReceived', listener);
  const fail = (why: string): never => {
    room.off('relayReceived', listener);
    pc.close();
    void room.relay(cam.sid, { direct: 'bye', session }).catch(() => {});
    throw new Error(why);
  };
  const timeoutMs = opts.timeoutMs ?? 4000;
  const ready = new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`direct path did not deliver video within ${timeoutMs} ms`)), timeoutMs);
    const check = () => {
      if (video && pc.connectionState === 'connected') {
        clearTimeout(timer);
        resolve();
      }
    };
    pc.oniceconnectionstatechange = () => {
      if (pc.iceConnectionState === 'connected' || pc.iceConnectionState === 'completed') mark('iceConnected');
    };
    pc.onconnectionstatechange = () => {
      if (pc.connectionState === 'connected') mark('dtlsConnected');
      if (pc.connectionState === 'failed') {
        clearTimeout(timer);
        reject(new Error('direct connection failed'));
      }
      check();
    };
    pc.ontrack = (ev) => {
      if (ev.track.kind === 'video') {
        video = ev.track;
        mark('firstTrack');
      } else audio = ev.track;
      check();
    };
    onSignal = (s) => {
      if (s.direct === 'bye') {
        clearTimeout(timer);
        reject(new Error(`camera refused: ${s.reason ?? 'no reason given'}`));
      }
    };
  });
  ready.catch(() => {}); // observed below; an early rejection must not go unhandled
  // Trickle: candidates gathered before the offer has gone wait for it.
  let offered = false;
  const queued: (RTCIceCandidate | null)[] = [];
  const sendCandidate = (c: RTCIceCandidate | null) => {
    const msg = c ? { direct: 'candidate', session, candidate: c.toJSON() } : { direct: 'candidate', session, end: true };
    void room.relay(cam.sid, msg).catch(() => {});
  };
  if (trickle) {
    pc.onicecandidate = (ev) => {
      if (offered) sendCandidate(ev.candidate);
      else queued.push(ev.candidate);
    };
  }
  try {
    await pc.setLocalDescription(await pc.createOffer());
    if (!trickle) await gathered(pc, 2000);
    mark('offerCreated');
    const answer = new Promise<string>((resolve, reject) => {
      const prev = onSignal;
      onSignal = (s) => {
        prev?.(s);
        if (s.direct === 'answer' && s.sdp) resolve(s.sdp);
        if (s.direct === 'bye') reject(new Error(`camera refused: ${s.reason ?? 'no reason given'}`));
      };
    });
    await room.relay(cam.sid, { direct: 'offer', session, sdp: pc.localDescription?.sdp });
    offered = true;
    for (const c of queued.splice(0)) sendCandidate(c);
    const sdp = await Promise.race([answer, ready.then(() => answer)]);
    mark('answerArrived');
    await pc.setRemoteDescription({ type: 'answer', sdp });
    remoteSet = true;
    for (const c of early.splice(0)) addRemote(c);
    await ready;
  } catch (err) {
    fail(err instanceof Error ? err.message : String(err));
  }
  const view: CameraView = {
    path: 'direct',
    video: video as MediaStreamTrack,
    audio,
    pc,
    steps,
    get cameraSteps() {
      return cameraSteps;
    },
    talk: async (track) => {
      await audioTx.sender.replaceTrack(track);
    },
    close: () => {
      room.off('relayReceived', listener);
      pc.close();
      void room.relay(cam.sid, { direct: 'bye', session }).catch(() => {});
    },
  };
  // The camera ending the session (it restarted, or closed us) ends the view's video.
  const prev = onSignal;
  onSignal = (s) => {
    prev?.(s);
    if (s.direct === 'bye') pc.close();
  };
  return view;
}

async function viaSFU(room: Room, cam: RemoteParticipant, reason: string, steps: Partial<Record<DirectStep, number>>): Promise<CameraView> {
  const pubs = [...cam.tracks.values()];
  const vpub = pubs.find((p) => p.kind === 'video');
  if (!vpub) throw new Error('viewCamera: the camera publishes no video');
  // Say so at once rather than after the subscription's timeout: the page can
  // play the camera's HTTP live stream instead (docs/cameras.md#viewing).
  const mime = vpub.info.mimeType;
  if (mime && !receivesOverWebRTC(mime)) {
    throw new PetrelError('codec_unsupported', `this browser cannot receive ${mime} over WebRTC; play /v1/cameras/<id>/live.mp4 instead`);
  }
  const got = new Promise<MediaStreamTrack>((resolve, reject) => {
    if (vpub.track) return resolve(vpub.track);
    const timer = setTimeout(() => reject(new Error('camera video did not arrive through the SFU')), 15_000);
    const on = (track: MediaStreamTrack, pub: { sid: string }) => {
      if (pub.sid !== vpub.sid) return;
      clearTimeout(timer);
      room.off('trackSubscribed', on);
      resolve(track);
    };
    room.on('trackSubscribed', on);
  });
  for (const p of pubs) await room.subscribe(p.sid, true);
  const video = await got;
  const apub = pubs.find((p) => p.kind === 'audio');
  return {
    path: 'sfu',
    reason,
    video,
    audio: apub?.track,
    steps,
    talk: async () => {
      throw new Error('talk-back through the SFU goes over the talk topic (publish the microphone)');
    },
    close: () => {
      for (const p of pubs) void room.subscribe(p.sid, false).catch(() => {});
    },
  };
}
