// Loaded in the page's head; it loads the app (app.js) too. On a camera page
// that will play over WebRTC it runs the WHEP start itself — peer connection,
// offer, POST as soon as the offer is made, answer applied — and shows the
// camera's video by itself, and the app loads only once the first frame is
// painted (or the start failed): on a fresh load neither the app's fetch and
// evaluation nor its layout compete with ICE, DTLS and the first frame. The
// camera page then takes the session and the video over as they stand
// (whepPlay's `prepared`). On a page that will play HTTP live it sends the
// stream's request, which playHTTP takes.
import { whepIceServers } from '../sdk/whep.js';

declare global {
  interface Window {
    petrelEarly?: {
      pc?: RTCPeerConnection;
      offer?: Promise<RTCSessionDescriptionInit>;
      options?: Promise<Response>;
      live?: Promise<Response>;
      /** The WHEP POST of the offer and, when 201, the answer applied (whepPlay's prepared.answered). */
      answered?: Promise<{ res: Response; answer?: string; refused?: unknown }>;
      /** performance.now() of the steps taken here. */
      at?: { pcCreated?: number; offerSent?: number; answerArrived?: number; iceConnected?: number; dtlsConnected?: number; gatheringComplete?: number; firstFrame?: number };
      /** The camera's video, playing before the app loaded; the camera page adopts it. */
      video?: HTMLVideoElement;
      /** requestVideoFrameCallback's metadata of that video's first frame. */
      firstFrameMeta?: object;
      /** Remote tracks that arrived before the page took the session over. */
      tracks?: MediaStreamTrack[];
      /** Local ICE candidates gathered before the page took the session over. */
      candidates?: RTCIceCandidate[];
    };
  }
}

// The app, once: a module script inserted after the document is parsed runs as the deferred one did.
let appLoaded = false;
const loadApp = () => {
  if (appLoaded) return;
  appLoaded = true;
  performance.mark?.('petrel:early:app');
  const s = document.createElement('script');
  s.type = 'module';
  s.src = 'app.js';
  document.head.append(s);
};
const whenParsed = (f: () => void) => (document.readyState === 'loading' ? document.addEventListener('DOMContentLoaded', f, { once: true }) : f());
// How long a camera page waits for its first frame before it loads the app anyway (a cold camera, a slow network).
const HOLD_MS = 1500;
let held = false;

const q = new URLSearchParams(location.search);
const id = q.get('camera');
const rtc = typeof RTCPeerConnection !== 'undefined';
const caps = rtc ? RTCRtpReceiver.getCapabilities?.('video') : undefined;
// As the page decides (receivesOverWebRTC): no H.264 only when the browser says so.
const noH264 = !!caps && !caps.codecs.some((c) => c.mimeType.toLowerCase() === 'video/h264');
const token = q.get('token');
if (id && token && q.get('hls') !== '1' && (q.get('http') === '1' || noH264)) {
  // The page will play HTTP live: the stream's request goes now (no-store: see playHTTP).
  const live = fetch(`/v1/cameras/${encodeURIComponent(id)}/live.mp4`, { headers: { Authorization: `Bearer ${token}` }, cache: 'no-store' });
  live.catch(() => {});
  window.petrelEarly = { live };
} else if (id && rtc && !noH264 && q.get('hls') !== '1' && q.get('http') !== '1' && q.get('direct') !== '1' && q.get('relay') !== '1' && q.get('trickle') !== '0') {
  const at: NonNullable<Window['petrelEarly']>['at'] = { pcCreated: performance.now() };
  // The TURN servers the server inlined in the page for its token (signal's
  // cameraPage): the connection has them from the start, no OPTIONS needed.
  let inlined: RTCIceServer[] | undefined;
  try {
    const json = document.getElementById('petrel-ice-servers')?.textContent;
    inlined = json ? (JSON.parse(json) as RTCIceServer[]) : undefined;
  } catch {
    inlined = undefined;
  }
  const pc = new RTCPeerConnection({ bundlePolicy: 'max-bundle', iceServers: inlined ?? [] });
  pc.addTransceiver('video', { direction: 'recvonly' });
  pc.addTransceiver('audio', { direction: 'recvonly' });
  const tracks: MediaStreamTrack[] = [];
  const candidates: RTCIceCandidate[] = [];
  pc.ontrack = (ev) => tracks.push(ev.track);
  pc.onicecandidate = (ev) => ev.candidate && candidates.push(ev.candidate);
  // Until the page takes over (it replaces these handlers).
  pc.oniceconnectionstatechange = () => ['connected', 'completed'].includes(pc.iceConnectionState) && (at.iceConnected ??= performance.now());
  pc.onconnectionstatechange = () => pc.connectionState === 'connected' && (at.dtlsConnected ??= performance.now());
  pc.onicegatheringstatechange = () => pc.iceGatheringState === 'complete' && (at.gatheringComplete ??= performance.now());
  performance.mark?.('petrel:early:pc');
  const offer = pc.createOffer();
  offer.then(() => performance.mark?.('petrel:early:offer')).catch(() => {});
  window.petrelEarly = { pc, offer, at, tracks, candidates };
  if (token) {
    const url = `/whep/${encodeURIComponent(`camera/${id}`)}`;
    const auth = { Authorization: `Bearer ${token}` };
    // Else the WHEP endpoint's STUN/TURN servers, set before gathering starts (as whepPlay does).
    const options = inlined ? undefined : fetch(url, { method: 'OPTIONS', headers: auth });
    options?.then(() => performance.mark?.('petrel:early:options')).catch(() => {});
    // The POST goes as soon as the offer is made, setLocalDescription alongside (trickle: see whep.ts).
    const answered = offer.then(async (o) => {
      at.offerSent = performance.now();
      performance.mark?.('petrel:early:offerSent');
      const local = (options ? whepIceServers(url, token, options) : Promise.resolve([]))
        .catch(() => [])
        .then((servers) => {
          if (servers.length) pc.setConfiguration({ ...pc.getConfiguration(), iceServers: servers });
          performance.mark?.('petrel:early:servers');
          return pc.setLocalDescription(o);
        })
        .then(() => performance.mark?.('petrel:early:localSet'));
      local.catch(() => {});
      const res = await fetch(url, { method: 'POST', headers: { 'Content-Type': 'application/sdp', ...auth }, body: o.sdp });
      at.answerArrived = performance.now();
      performance.mark?.('petrel:early:answer');
      if (res.status !== 201) return { res };
      const answer = await res.text();
      try {
        await local;
        performance.mark?.('petrel:early:beforeRemote');
        await pc.setRemoteDescription({ type: 'answer', sdp: answer });
        performance.mark?.('petrel:early:remote');
        return { res, answer };
      } catch (refused) {
        return { res, answer, refused };
      }
    });
    answered.catch(() => {});
    const early: NonNullable<Window['petrelEarly']> = { pc, offer, options, answered, at, tracks, candidates };
    window.petrelEarly = early;

    // The video plays here; the app loads once its first frame is painted, or
    // at once when the start failed (the app says why and falls back), or after HOLD_MS.
    held = true;
    const video = document.createElement('video');
    video.autoplay = video.muted = video.playsInline = true;
    early.video = video;
    document.documentElement.classList.add('camera-early');
    const painted = (_now?: number, meta?: object) => {
      at.firstFrame ??= performance.now();
      early.firstFrameMeta = meta;
      performance.mark?.('petrel:early:firstFrame');
      loadApp();
    };
    const play = (track: MediaStreamTrack) => {
      video.srcObject = new MediaStream([track]);
      if (video.requestVideoFrameCallback) video.requestVideoFrameCallback(painted);
      else video.addEventListener('playing', () => painted(), { once: true });
    };
    // The video receiver's track exists before the answer (ontrack gives the
    // same one): the player is made now, while the offer is on its way, not after it.
    const receiving = pc.getTransceivers()[0]?.receiver.track;
    if (receiving?.kind === 'video') play(receiving);
    pc.ontrack = (ev) => {
      tracks.push(ev.track);
      if (ev.track.kind === 'video' && !video.srcObject) play(ev.track);
    };
    pc.onconnectionstatechange = () => {
      if (pc.connectionState === 'connected') at.dtlsConnected ??= performance.now();
      if (pc.connectionState === 'failed') loadApp();
    };
    answered.then((a) => (a.res.status !== 201 || a.refused) && loadApp(), loadApp);
    offer.catch(loadApp);
    setTimeout(loadApp, HOLD_MS);
    // Until the app loads the page is this video alone, first in <body>: the
    // rest of the page is not styled or laid out (display: none), and no text
    // is shaped, while the session starts (a fresh renderer's first text
    // layout took tens of milliseconds of the main thread).
    const style = document.createElement('style');
    style.textContent = 'html.camera-early body > :not(.camera-early-page) { display: none }';
    document.head.append(style);
    const page = document.createElement('section');
    page.className = 'camera-page camera-early-page';
    const view = document.createElement('div');
    view.className = 'camera-view';
    view.append(video);
    page.append(view);
    const place = () => {
      if (!document.body) return false;
      document.body.prepend(page);
      return true;
    };
    if (!place()) {
      const seen = new MutationObserver(() => place() && seen.disconnect());
      seen.observe(document.documentElement, { childList: true, subtree: true });
      whenParsed(() => seen.disconnect());
    }
  }
}
if (!held) whenParsed(loadApp);

export {};
