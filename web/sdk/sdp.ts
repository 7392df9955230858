// Reads which media section carries which track. Remote track ids are not reliable
// across browsers (Firefox makes up its own), but the SDP's `a=msid:<stream> <track>`
// per `a=mid:` is: the server sets stream = participant sid, track = track sid.

export interface MsidInfo {
  streamId: string;
  trackId: string;
}

export function msidByMid(sdp: string): Map<string, MsidInfo> {
  const out = new Map<string, MsidInfo>();
  for (const section of sdp.split(/\r?\nm=/).slice(1)) {
    let mid: string | undefined;
    let msid: MsidInfo | undefined;
    for (const line of section.split(/\r?\n/)) {
      if (line.startsWith('a=mid:')) mid = line.slice(6).trim();
      else if (line.startsWith('a=msid:')) {
        const [streamId, trackId] = line.slice(7).trim().split(/\s+/);
        if (streamId && trackId) msid = { streamId, trackId };
      } else if (!msid && /^a=ssrc:\d+ msid:/.test(line)) {
        // Older form, still emitted by some stacks next to or instead of a=msid.
        const [streamId, trackId] = line.replace(/^a=ssrc:\d+ msid:/, '').trim().split(/\s+/);
        if (streamId && trackId) msid = { streamId, trackId };
      }
    }
    if (mid !== undefined && msid) out.set(mid, msid);
  }
  return out;
}

// The codecs this browser decodes, per kind: RTCRtpReceiver.getCapabilities.
export interface ReceiveCodec {
  mimeType: string;
  sdpFmtpLine?: string;
}
export type ReceiveCodecs = (kind: 'audio' | 'video') => ReceiveCodec[] | undefined;

function fmtpParams(fmtp: string | undefined): Map<string, string> {
  const out = new Map<string, string>();
  for (const kv of (fmtp ?? '').split(';')) {
    const [k, v] = kv.split('=');
    if (k && v !== undefined) out.set(k.trim().toLowerCase(), v.trim().toLowerCase());
  }
  return out;
}

// libwebrtc's H.264 profiles (h264_profile_level_id.cc): profile_idc, and a pattern of
// the constraint byte (MSB first, x: any bit).
const h264Profiles: [number, string, string][] = [
  [0x42, 'x1xx0000', 'cb'], [0x4d, '1xxx0000', 'cb'], [0x58, '11xx0000', 'cb'],
  [0x42, 'x0xx0000', 'baseline'], [0x58, '10xx0000', 'baseline'], [0x4d, '0x0x0000', 'main'],
  [0x64, '00000000', 'high'], [0x64, '00001100', 'constrained-high'], [0xf4, '00000000', 'high444'],
];

// The H.264 profile of a profile-level-id ('42001f' when absent, RFC 6184), or the id
// itself when it is none of those.
export function h264Profile(profileLevelId: string | undefined): string {
  const id = (profileLevelId ?? '42001f').toLowerCase();
  const idc = parseInt(id.slice(0, 2), 16);
  const iop = parseInt(id.slice(2, 4), 16);
  for (const [pidc, pattern, name] of h264Profiles) {
    if (pidc === idc && [...pattern].every((b, i) => b === 'x' || Number(b) === ((iop >> (7 - i)) & 1))) return name;
  }
  return id.slice(0, 4);
}

// Whether the browser decodes `name` with `fmtp`. H.264 is decodable per profile and
// packetization mode, as browsers match it; levels are asymmetric, so they do not count.
function decodable(caps: ReceiveCodec[], name: string, fmtp: string | undefined): boolean {
  const mime = name.toLowerCase();
  return caps.some((c) => {
    if (c.mimeType.toLowerCase().split('/')[1] !== mime) return false;
    if (mime !== 'h264') return true;
    const want = fmtpParams(fmtp);
    const have = fmtpParams(c.sdpFmtpLine);
    return h264Profile(want.get('profile-level-id')) === h264Profile(have.get('profile-level-id')) &&
      (want.get('packetization-mode') ?? '0') === (have.get('packetization-mode') ?? '0');
  });
}

/**
 * Rejects (port 0, out of BUNDLE) each media section of the server's offer whose
 * codecs this browser cannot decode, and keeps rejecting the mids in `rejected` (a
 * section once rejected stays so). Otherwise the browser's own answer would reject
 * it, and a rejected BUNDLE-tag section fails the whole answer. Returns the new
 * offer and the mids rejected for the first time.
 */
export function rejectUndecodable(sdp: string, rejected: Set<string>, receive: ReceiveCodecs): { sdp: string; newly: string[] } {
  const eol = sdp.includes('\r\n') ? '\r\n' : '\n';
  const parts = sdp.split(/\r?\nm=/);
  const newly: string[] = [];
  const drop = new Set<string>();
  for (let i = 1; i < parts.length; i++) {
    const lines = parts[i].split(/\r?\n/);
    const [kind, port] = lines[0].split(' ');
    const mid = lines.find((l) => l.startsWith('a=mid:'))?.slice(6).trim();
    if (mid === undefined || (kind !== 'audio' && kind !== 'video') || port === '0') continue;
    let reject = rejected.has(mid);
    const caps = receive(kind);
    if (!reject && caps) {
      const fmtp = new Map<string, string>();
      for (const l of lines) {
        const m = /^a=fmtp:(\d+) (.*)$/.exec(l);
        if (m) fmtp.set(m[1], m[2]);
      }
      const codecs = lines.map((l) => /^a=rtpmap:(\d+) ([^/]+)\//.exec(l)).filter((m) => m !== null);
      reject = codecs.length > 0 && !codecs.some((m) => decodable(caps, m[2], fmtp.get(m[1])));
      if (reject) {
        rejected.add(mid);
        newly.push(mid);
      }
    }
    if (!reject) continue;
    drop.add(mid);
    lines[0] = [kind, '0', ...lines[0].split(' ').slice(2)].join(' ');
    parts[i] = lines.join(eol);
  }
  if (drop.size) {
    const head = parts[0].split(/\r?\n/).flatMap((l) => {
      if (!l.startsWith('a=group:BUNDLE ')) return [l];
      const mids = l.slice(15).trim().split(/\s+/).filter((m) => !drop.has(m));
      return mids.length ? [['a=group:BUNDLE', ...mids].join(' ')] : [];
    });
    parts[0] = head.join(eol);
  }
  return { sdp: parts.join(`${eol}m=`), newly };
}
