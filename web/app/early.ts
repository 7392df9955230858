// Loaded in the page's head, before app.js. On a camera page that will play
// over WebRTC it runs the WHEP start itself — peer connection, offer, POST as
// soon as the offer is made, answer applied — so that neither the app's
// evaluation nor its first layout stands between the offer and the POST; the
// camera page takes the session over as it stands (whepPlay's `prepared`). On
// a page that will play HTTP live it sends the stream's request, which
// playHTTP takes.
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
      at?: { pcCreated?: number; offerSent?: number; answerArrived?: number; iceConnected?: number; dtlsConnected?: number; gatheringComplete?: number };
      /** Remote tracks that arrived before the page took the session over. */
      tracks?: MediaStreamTrack[];
      /** Local ICE candidates gathered before the page took the session over. */
      candidates?: RTCIceCandidate[];
    };
  }
}

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
  const pc = new RTCPeerConnection({ bundlePolicy: 'max-bundle' });
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
    // The WHEP endpoint's STUN/TURN servers, set before gathering starts (as whepPlay does).
    const options = fetch(url, { method: 'OPTIONS', headers: auth });
    options.catch(() => {});
    // The POST goes as soon as the offer is made, setLocalDescription alongside (trickle: see whep.ts).
    const answered = offer.then(async (o) => {
      at.offerSent = performance.now();
      performance.mark?.('petrel:early:offerSent');
      const local = whepIceServers(url, token, options)
        .catch(() => [])
        .then((servers) => {
          if (servers.length) pc.setConfiguration({ ...pc.getConfiguration(), iceServers: servers });
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
        await pc.setRemoteDescription({ type: 'answer', sdp: answer });
        performance.mark?.('petrel:early:remote');
        return { res, answer };
      } catch (refused) {
        return { res, answer, refused };
      }
    });
    answered.catch(() => {});
    window.petrelEarly = { pc, offer, options, answered, at, tracks, candidates };
  }
}

export {};
