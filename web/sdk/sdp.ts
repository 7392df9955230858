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
