// Loaded in the page's head, before app.js: on a camera page that will play over
// WebRTC it starts the peer connection and its offer at once, so that the
// browser makes its certificate and offer (tens of ms in a fresh page) while
// app.js loads; the camera page takes them over (whepPlay's `prepared`).
declare global {
  interface Window {
    petrelEarly?: { pc: RTCPeerConnection; offer: Promise<RTCSessionDescriptionInit> };
  }
}

const q = new URLSearchParams(location.search);
const other = ['http', 'direct', 'relay'].some((k) => q.get(k) === '1') || q.get('trickle') === '0';
if (q.get('camera') && !other && typeof RTCPeerConnection !== 'undefined') {
  const caps = RTCRtpReceiver.getCapabilities?.('video');
  // Without H.264 for WebRTC the page plays HTTP live: no connection to make.
  if (!caps || caps.codecs.some((c) => c.mimeType.toLowerCase() === 'video/h264')) {
    const pc = new RTCPeerConnection({ bundlePolicy: 'max-bundle' });
    pc.addTransceiver('video', { direction: 'recvonly' });
    pc.addTransceiver('audio', { direction: 'recvonly' });
    const offer = pc.createOffer();
    offer.catch(() => {});
    window.petrelEarly = { pc, offer };
  }
}

export {};
