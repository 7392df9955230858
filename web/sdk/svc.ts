// Scalable video (SVC): one encoding that carries spatial and temporal layers
// (VP9 or AV1 with a scalabilityMode such as L3T3_KEY), which the server thins
// per viewer instead of choosing among simulcast encodings. AV1 needs the
// dependency descriptor header extension, which Chromium leaves out of its
// offers and answers unless asked.

export const DEPENDENCY_DESCRIPTOR_URI = 'https://aomediacodec.github.io/av1-rtp-spec/#dependency-descriptor-rtp-header-extension';

/** What `PublishOptions.svc` may name. */
export type SvcCodec = 'vp9' | 'av1';

/** The three spatial layers L3T3_KEY sends (quarter, half, full size), described as simulcast layers are. */
export const SVC_MODE = 'L3T3_KEY';

// Turns the dependency descriptor on for a transceiver where the browser has
// the control (Chromium's setHeaderExtensionsToNegotiate); elsewhere nothing.
export function negotiateDependencyDescriptor(t: RTCRtpTransceiver): void {
  const tt = t as RTCRtpTransceiver & {
    getHeaderExtensionsToNegotiate?: () => { uri: string; direction: string }[];
    setHeaderExtensionsToNegotiate?: (exts: { uri: string; direction: string }[]) => void;
  };
  if (!tt.getHeaderExtensionsToNegotiate || !tt.setHeaderExtensionsToNegotiate) return;
  const exts = tt.getHeaderExtensionsToNegotiate();
  const dd = exts.find((e) => e.uri === DEPENDENCY_DESCRIPTOR_URI);
  if (!dd || dd.direction !== 'stopped') return;
  dd.direction = 'sendrecv';
  try {
    tt.setHeaderExtensionsToNegotiate(exts);
  } catch (err) {
    console.warn('petrel: dependency descriptor not negotiable', err);
  }
}

/** The codec mime type an SVC choice publishes with, if this browser encodes it. */
export function svcMime(codec: SvcCodec): string | undefined {
  const mime = codec === 'av1' ? 'video/AV1' : 'video/VP9';
  const caps = typeof RTCRtpSender !== 'undefined' ? RTCRtpSender.getCapabilities?.('video')?.codecs : undefined;
  return caps?.some((c) => c.mimeType.toLowerCase() === mime.toLowerCase()) ? mime : undefined;
}
