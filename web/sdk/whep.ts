// WHEP playback (a camera's room, or any room's tracks) that starts at once: the
// offer is POSTed as soon as it is set, without waiting for ICE gathering. The
// server learns the viewer's address from the viewer's connectivity checks; an
// ICE-lite answer (the lean egress) needs no candidates at all, and to a full-ICE
// server the viewer's candidates follow as PATCHes (trickle-ice-sdpfrag).
import { PetrelError } from './protocol.js';
import { gathered } from './room.js';

export type WhepStep = 'pcCreated' | 'offerSent' | 'answerArrived' | 'iceConnected' | 'dtlsConnected' | 'firstTrack' | 'gatheringComplete';

export interface WhepOptions {
  /** Bearer token with the subscribe grant for the room. */
  token: string;
  /**
   * STUN/TURN servers; a promise is awaited while the offer is created, and
   * applied before gathering starts. By default those of the WHEP OPTIONS's
   * Link headers (whepIceServers): the server is ICE-lite and never checks
   * toward the viewer, so a viewer that cannot pair its own addresses with the
   * server's (Firefox on the server's machine) needs its TURN.
   */
  iceServers?: RTCIceServer[] | Promise<RTCIceServer[]>;
  iceTransportPolicy?: RTCIceTransportPolicy;
  /** Steps as they happen, in ms since whepPlay was called. */
  onStep?: (step: WhepStep, ms: number) => void;
  /** Each remote track as it arrives (video and audio). */
  onTrack?: (track: MediaStreamTrack) => void;
  /**
   * Trickle (default true): the offer goes before gathering completes. false
   * waits for every candidate first (bounded, 2 s), for a WHEP server that is
   * neither ICE-lite nor takes PATCHes.
   */
  trickle?: boolean;
  /**
   * A connection made earlier with its offer on the way (recvonly video then
   * audio transceivers, no ICE servers yet), for a page that starts it before
   * its script has loaded; whepPlay takes it over.
   */
  prepared?: {
    pc?: RTCPeerConnection;
    offer?: Promise<RTCSessionDescriptionInit>;
    /**
     * The offer already POSTed (to this url, ICE servers and local description
     * set) and, when 201, the answer applied or refused: whepPlay takes the
     * session as it stands. Needs pc.
     */
    answered?: Promise<{ res: Response; answer?: string; refused?: unknown }>;
    /** performance.now() of steps already taken; steps count from offerSent then (the session's start). */
    at?: { pcCreated?: number; offerSent?: number; answerArrived?: number; iceConnected?: number; dtlsConnected?: number; gatheringComplete?: number };
    /** Remote tracks that arrived before whepPlay took the connection over. */
    tracks?: MediaStreamTrack[];
    /** Local ICE candidates gathered before whepPlay took the connection over (a full-ICE server gets them). */
    candidates?: RTCIceCandidate[];
  };
  /** The connection failed after the answer (ICE or DTLS). */
  onFailed?: (why: string) => void;
}

export interface WhepSession {
  pc: RTCPeerConnection;
  /** The session's URL (the answer's Location), for PATCH and DELETE. */
  location?: string;
  /** ICE gathering state when the offer went out: anything but 'complete' means it did not wait. */
  gatheringAtOffer: RTCIceGatheringState;
  /** Whether the server answered ICE-lite (then no candidate is trickled). */
  iceLite: boolean;
  steps: Partial<Record<WhepStep, number>>;
  /** Ends the session (DELETE) and closes the connection. */
  close(): void;
}

/**
 * A refused WHEP POST. codecUnsupported: the server cannot send the room's
 * video in any codec the offer lists (the browser lacks it): play another way.
 */
export class WhepError extends PetrelError {
  constructor(
    code: string,
    message: string,
    readonly status: number,
    readonly codecUnsupported: boolean,
  ) {
    super(code, message);
    this.name = 'WhepError';
  }
}

/** The browser's WebRTC receive codecs for kind, lower-case MIME types; null when it does not say. */
export function receiveCodecs(kind: 'video' | 'audio' = 'video'): Set<string> | null {
  const caps = typeof RTCRtpReceiver !== 'undefined' ? RTCRtpReceiver.getCapabilities?.(kind) : null;
  return caps ? new Set(caps.codecs.map((c) => c.mimeType.toLowerCase())) : null;
}

/**
 * Whether this browser can receive mime (e.g. "video/H264") over WebRTC, as
 * its receiver capabilities say; true when it does not say (then the server's
 * answer tells). A Firefox whose OpenH264 plugin is missing lists no H.264.
 */
export function receivesOverWebRTC(mime: string): boolean {
  const codecs = receiveCodecs(mime.toLowerCase().startsWith('audio/') ? 'audio' : 'video');
  return codecs === null || codecs.has(mime.toLowerCase());
}

/** A performance mark (petrel:whep:<what>) for profiling a start in the browser's own timeline. */
function trace(what: string): void {
  performance.mark?.(`petrel:whep:${what}`);
}

/** Reads a Petrel error body ({code, message}) or the text of a failed response. */
async function errorOf(res: Response): Promise<{ code: string; message: string }> {
  const text = await res.text().catch(() => '');
  try {
    const j = JSON.parse(text) as { code?: unknown; message?: unknown };
    if (typeof j.code === 'string') return { code: j.code, message: typeof j.message === 'string' ? j.message : '' };
  } catch {
    /* not JSON */
  }
  return { code: `http_${res.status}`, message: text.slice(0, 200) || res.statusText };
}

/** The ICE credentials of a description, for an sdpfrag. */
function iceCreds(sdp: string): { ufrag?: string; pwd?: string } {
  return { ufrag: /a=ice-ufrag:(\S+)/.exec(sdp)?.[1], pwd: /a=ice-pwd:(\S+)/.exec(sdp)?.[1] };
}

/** A trickle-ice-sdpfrag (RFC 8840) carrying candidates of one BUNDLE group. */
export function sdpFrag(localSdp: string, mid: string, candidates: string[]): string {
  const { ufrag, pwd } = iceCreds(localSdp);
  const lines = [`a=ice-ufrag:${ufrag ?? ''}`, `a=ice-pwd:${pwd ?? ''}`, 'm=audio 9 RTP/AVP 0', `a=mid:${mid}`];
  for (const c of candidates) lines.push(`a=${c}`);
  return lines.join('\r\n') + '\r\n';
}

/**
 * The STUN/TURN servers a WHEP endpoint names in its OPTIONS's Link headers;
 * options: that OPTIONS request, if it was made already (a page's early script).
 */
export async function whepIceServers(url: string, token: string, options?: Promise<Response>): Promise<RTCIceServer[]> {
  const res = await (options ?? fetch(url, { method: 'OPTIONS', headers: { Authorization: `Bearer ${token}` } }));
  const out: RTCIceServer[] = [];
  for (const link of (res.headers.get('Link') ?? '').split(/,(?=\s*<)/)) {
    const m = /<([^>]+)>.*rel="ice-server"/.exec(link);
    if (!m) continue;
    const username = /username="([^"]*)"/.exec(link)?.[1];
    const credential = /credential="([^"]*)"/.exec(link)?.[1];
    out.push({ urls: m[1], username, credential });
  }
  return out;
}

/**
 * Starts a WHEP session at url (e.g. `/whep/camera%2Fdoor`): receive-only video
 * and audio, the offer sent before gathering completes. Rejects with WhepError
 * when the server refuses the offer.
 */
export async function whepPlay(url: string, opts: WhepOptions): Promise<WhepSession> {
  const early = opts.prepared?.answered && opts.prepared.pc ? opts.prepared : undefined;
  const start = early?.at?.offerSent ?? performance.now();
  const steps: Partial<Record<WhepStep, number>> = {};
  const mark = (s: WhepStep, when = performance.now()) => {
    if (steps[s] !== undefined) return;
    steps[s] = Math.round((when - start) * 10) / 10;
    trace(s);
    opts.onStep?.(s, steps[s] as number);
  };
  const auth = { Authorization: `Bearer ${opts.token}` };
  const policy = opts.iceTransportPolicy ?? 'all';
  const iceServers = opts.iceServers ?? whepIceServers(url, opts.token).catch(() => []);
  const servers = iceServers instanceof Promise ? undefined : iceServers;
  let pc: RTCPeerConnection;
  let offered: Promise<RTCSessionDescriptionInit>;
  if (early?.pc) {
    pc = early.pc;
    offered = Promise.resolve({ type: 'offer' });
  } else if (opts.prepared?.pc && opts.prepared.offer && opts.prepared.pc.signalingState === 'stable' && policy === 'all') {
    ({ pc, offer: offered } = opts.prepared);
    if (servers?.length) pc.setConfiguration({ ...pc.getConfiguration(), iceServers: servers });
  } else {
    opts.prepared?.pc?.close();
    pc = new RTCPeerConnection({ iceServers: servers ?? [], iceTransportPolicy: policy, bundlePolicy: 'max-bundle' });
    pc.addTransceiver('video', { direction: 'recvonly' });
    pc.addTransceiver('audio', { direction: 'recvonly' });
    offered = pc.createOffer();
  }
  mark('pcCreated', early?.at?.pcCreated);
  let failed = false;
  pc.oniceconnectionstatechange = () => {
    if (pc.iceConnectionState === 'connected' || pc.iceConnectionState === 'completed') mark('iceConnected');
  };
  pc.onconnectionstatechange = () => {
    if (pc.connectionState === 'connected') mark('dtlsConnected');
    if (pc.connectionState === 'failed' && !failed) {
      failed = true;
      opts.onFailed?.(`connection failed (ICE ${pc.iceConnectionState})`);
    }
  };
  const onTrack = (track: MediaStreamTrack) => {
    if (track.kind === 'video') mark('firstTrack');
    opts.onTrack?.(track);
  };
  pc.ontrack = (ev) => onTrack(ev.track);
  // Candidates gathered before the answer wait; whether they go at all
  // depends on the answer (ICE-lite needs none).
  const pending: string[] = [];
  let sendCandidates: ((c: string[]) => void) | null = null;
  let mid = '0';
  pc.onicecandidate = (ev) => {
    if (!ev.candidate || opts.trickle === false) return;
    if (ev.candidate.sdpMid) mid = ev.candidate.sdpMid;
    if (!ev.candidate.candidate) return;
    if (sendCandidates) sendCandidates([ev.candidate.candidate]);
    else pending.push(ev.candidate.candidate);
  };
  pc.onicegatheringstatechange = () => {
    if (pc.iceGatheringState === 'complete') mark('gatheringComplete');
  };
  for (const candidate of early?.candidates?.splice(0) ?? []) pc.onicecandidate({ candidate } as RTCPeerConnectionIceEvent);
  let res: Response;
  let gatheringAtOffer: RTCIceGatheringState;
  // The offer is applied once the STUN/TURN servers are known (they must be
  // set before gathering starts). With trickle it is POSTed meanwhile: neither
  // the servers' OPTIONS nor setLocalDescription holds up the answer.
  const applyLocal = async (offer: RTCSessionDescriptionInit) => {
    const later = iceServers instanceof Promise ? await iceServers : undefined;
    trace('iceServers');
    if (later?.length) pc.setConfiguration({ ...pc.getConfiguration(), iceServers: later });
    await pc.setLocalDescription(offer);
    trace('localSet');
  };
  const post = (sdp: string | undefined) => fetch(url, { method: 'POST', headers: { 'Content-Type': 'application/sdp', ...auth }, body: sdp });
  let early201: { answer?: string; refused?: unknown } | undefined;
  try {
    const offer = await offered;
    trace('offerCreated');
    if (early?.answered) {
      // Started before the page's script: the steps happened, at their own times.
      gatheringAtOffer = 'new';
      mark('offerSent', early.at?.offerSent);
      const got = await early.answered;
      res = got.res;
      early201 = got;
      if (res.status === 201) mark('answerArrived', early.at?.answerArrived);
      // Tracks and states that came before this takeover.
      for (const track of early.tracks?.splice(0) ?? []) onTrack(track);
      if (early.at?.iceConnected) mark('iceConnected', early.at.iceConnected);
      if (early.at?.dtlsConnected) mark('dtlsConnected', early.at.dtlsConnected);
      if (early.at?.gatheringComplete) mark('gatheringComplete', early.at.gatheringComplete);
      pc.oniceconnectionstatechange?.(new Event('iceconnectionstatechange'));
      pc.onconnectionstatechange?.(new Event('connectionstatechange'));
      pc.onicegatheringstatechange?.(new Event('icegatheringstatechange'));
    } else if (opts.trickle === false) {
      await applyLocal(offer);
      await gathered(pc, 2000);
      gatheringAtOffer = pc.iceGatheringState;
      mark('offerSent');
      res = await post(pc.localDescription?.sdp);
    } else {
      gatheringAtOffer = pc.iceGatheringState;
      mark('offerSent');
      const local = applyLocal(offer);
      local.catch(() => {}); // awaited below; the POST may fail first
      res = await post(offer.sdp);
      if (res.status === 201) mark('answerArrived'); // setLocalDescription may still run
      await local;
    }
  } catch (err) {
    pc.close();
    throw err;
  }
  if (res.status !== 201) {
    pc.close();
    const e = await errorOf(res);
    const codec = e.code === 'sdp_invalid' && /codec/i.test(e.message);
    throw new WhepError(e.code, e.message, res.status, codec);
  }
  mark('answerArrived');
  const answer = early201 ? (early201.answer ?? '') : await res.text();
  const location = res.headers.get('Location') ?? undefined;
  const target = location ? new URL(location, new URL(url, globalThis.location?.href)).toString() : undefined;
  const iceLite = /^a=ice-lite/m.test(answer);
  try {
    if (early201?.refused) throw early201.refused;
    if (!early201) await pc.setRemoteDescription({ type: 'answer', sdp: answer });
    trace('remoteSet');
  } catch (err) {
    pc.close();
    // The server's session would otherwise wait for its ICE timeout.
    if (target) void fetch(target, { method: 'DELETE', headers: auth }).catch(() => {});
    throw new WhepError('sdp_invalid', `the browser refused the server's answer: ${err instanceof Error ? err.message : String(err)}`, 201, false);
  }
  if (!iceLite && target) {
    // A full-ICE server checks these too; it also learns the address from our checks.
    sendCandidates = (c) => {
      const local = pc.localDescription?.sdp;
      if (!local || pc.signalingState === 'closed') return;
      void fetch(target, { method: 'PATCH', headers: { 'Content-Type': 'application/trickle-ice-sdpfrag', ...auth }, body: sdpFrag(local, mid, c) }).catch(() => {});
    };
    if (pending.length) sendCandidates(pending.splice(0));
  }
  let closed = false;
  return {
    pc,
    location,
    gatheringAtOffer,
    iceLite,
    steps,
    close: () => {
      if (closed) return;
      closed = true;
      if (target) void fetch(target, { method: 'DELETE', headers: auth, keepalive: true }).catch(() => {});
      pc.close();
    },
  };
}
