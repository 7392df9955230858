// Loaded in the page's head, before app.js: on a camera page that will play over
// WebRTC it starts the peer connection and its offer at once, and asks the WHEP
// endpoint for its STUN/TURN servers, so that the browser makes its certificate
// and offer (tens of ms in a fresh page) while app.js loads; the camera page
// takes them over (whepPlay's `prepared`, whepIceServers' `options`). On one
// that will play HTTP live it sends the stream's request, which playHTTP takes.
declare global {
  interface Window {
    petrelEarly?: { pc?: RTCPeerConnection; offer?: Promise<RTCSessionDescriptionInit>; options?: Promise<Response>; live?: Promise<Response> };
  }
}

const q = new URLSearchParams(location.search);
const id = q.get('camera');
const rtc = typeof RTCPeerConnection !== 'undefined';
const caps = rtc ? RTCRtpReceiver.getCapabilities?.('video') : undefined;
// As the page decides (receivesOverWebRTC): no H.264 only when the browser says so.
const noH264 = !!caps && !caps.codecs.some((c) => c.mimeType.toLowerCase() === 'video/h264');
const token = q.get('token');
if (id && token && (q.get('http') === '1' || noH264)) {
  // The page will play HTTP live: the stream's request goes now (no-store: see playHTTP).
  const live = fetch(`/v1/cameras/${encodeURIComponent(id)}/live.mp4`, { headers: { Authorization: `Bearer ${token}` }, cache: 'no-store' });
  live.catch(() => {});
  window.petrelEarly = { live };
} else if (id && rtc && !noH264 && q.get('http') !== '1' && q.get('direct') !== '1' && q.get('relay') !== '1' && q.get('trickle') !== '0') {
  const pc = new RTCPeerConnection({ bundlePolicy: 'max-bundle' });
  pc.addTransceiver('video', { direction: 'recvonly' });
  pc.addTransceiver('audio', { direction: 'recvonly' });
  performance.mark?.('petrel:early:pc');
  const offer = pc.createOffer();
  offer.then(() => performance.mark?.('petrel:early:offer')).catch(() => {});
  // The WHEP endpoint's STUN/TURN servers (whepIceServers reads the answer).
  const options = token ? fetch(`/whep/${encodeURIComponent(`camera/${id}`)}`, { method: 'OPTIONS', headers: { Authorization: `Bearer ${token}` } }) : undefined;
  options?.catch(() => {});
  window.petrelEarly = { pc, offer, options };
}

export {};
