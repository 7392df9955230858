// Turns the two peer connections' getStats() reports into a small summary a page
// can show: bitrates (from the byte counters' difference since the last call),
// loss, round-trip time and per-track decode progress.

export type ConnectionQuality = 'excellent' | 'good' | 'poor' | 'lost' | 'unknown';

export interface TrackStats {
  trackSid: string;
  participantSid: string;
  kind: 'audio' | 'video';
  direction: 'inbound' | 'outbound';
  bitrate: number; // bits per second
  bytes: number;
  packets: number;
  packetsLost: number;
  jitterMs?: number;
  framesDecoded?: number;
  framesEncoded?: number;
  framesPerSecond?: number;
  frameWidth?: number;
  frameHeight?: number;
  totalSamplesReceived?: number;
  /** The connection the stream travels on: through the server, or the direct one of a 1:1 call. */
  path: 'sfu' | 'p2p';
}

export interface CandidatePairStats {
  localType: string; // host | srflx | prflx | relay
  remoteType: string;
  protocol: string; // udp | tcp
  rttMs?: number;
}

export interface StatsSummary {
  timestamp: number;
  bitrateIn: number;
  bitrateOut: number;
  packetsLost: number;
  packetsReceived: number;
  rttMs?: number;
  quality: ConnectionQuality;
  publisher?: CandidatePairStats;
  subscriber?: CandidatePairStats;
  direct?: CandidatePairStats;
  tracks: TrackStats[];
}

// Which track an RTP stream belongs to: looked up by the transceiver's mid.
export type TrackResolver = (
  direction: 'inbound' | 'outbound',
  mid: string | undefined,
  via: 'publisher' | 'subscriber' | 'direct',
) => { trackSid: string; participantSid: string } | undefined;

interface Counter {
  bytes: number;
  at: number;
  bitrate: number;
}

export class StatsCollector {
  private last = new Map<string, Counter>();
  private lastTotals = { received: 0, lost: 0 };

  async collect(
    publisher: RTCPeerConnection | null,
    subscriber: RTCPeerConnection | null,
    resolve: TrackResolver,
    direct: RTCPeerConnection | null = null,
  ): Promise<StatsSummary> {
    const summary: StatsSummary = {
      timestamp: Date.now(),
      bitrateIn: 0,
      bitrateOut: 0,
      packetsLost: 0,
      packetsReceived: 0,
      quality: 'unknown',
      tracks: [],
    };
    const seen = new Set<string>();
    const rtts: number[] = [];
    for (const [pc, name] of [
      [publisher, 'publisher'],
      [subscriber, 'subscriber'],
      [direct, 'direct'],
    ] as const) {
      if (!pc) continue;
      const report = await pc.getStats();
      const pair = selectedPair(report);
      if (pair) {
        summary[name] = pair;
        if (pair.rttMs !== undefined) rtts.push(pair.rttMs);
      }
      report.forEach((s) => {
        if (s.type !== 'inbound-rtp' && s.type !== 'outbound-rtp') return;
        const inbound = s.type === 'inbound-rtp';
        const key = `${name}/${s.id}`;
        seen.add(key);
        const bytes: number = (inbound ? s.bytesReceived : s.bytesSent) ?? 0;
        const prev = this.last.get(key);
        const now = s.timestamp as number;
        let bitrate = prev?.bitrate ?? 0;
        // Chrome hands out a cached report to calls close together (same timestamp):
        // keep the previous rate then instead of reporting zero.
        if (!prev || now > prev.at) {
          if (prev) bitrate = Math.max(0, ((bytes - prev.bytes) * 8 * 1000) / (now - prev.at));
          this.last.set(key, { bytes, at: now, bitrate });
        }
        const owner = resolve(inbound ? 'inbound' : 'outbound', s.mid, name);
        const t: TrackStats = {
          trackSid: owner?.trackSid ?? '',
          participantSid: owner?.participantSid ?? '',
          kind: s.kind ?? s.mediaType,
          direction: inbound ? 'inbound' : 'outbound',
          bitrate,
          bytes,
          packets: (inbound ? s.packetsReceived : s.packetsSent) ?? 0,
          packetsLost: s.packetsLost ?? 0,
          jitterMs: typeof s.jitter === 'number' ? s.jitter * 1000 : undefined,
          framesDecoded: s.framesDecoded,
          framesEncoded: s.framesEncoded,
          framesPerSecond: s.framesPerSecond,
          frameWidth: s.frameWidth,
          frameHeight: s.frameHeight,
          totalSamplesReceived: s.totalSamplesReceived,
          path: name === 'direct' ? 'p2p' : 'sfu',
        };
        summary.tracks.push(t);
        if (inbound) {
          summary.bitrateIn += bitrate;
          summary.packetsLost += t.packetsLost;
          summary.packetsReceived += t.packets;
        } else summary.bitrateOut += bitrate;
      });
    }
    for (const k of this.last.keys()) if (!seen.has(k)) this.last.delete(k);
    if (rtts.length) summary.rttMs = Math.max(...rtts);
    // Loss over the interval since the previous call, so an old burst fades out.
    const received = summary.packetsReceived - this.lastTotals.received;
    const lost = summary.packetsLost - this.lastTotals.lost;
    this.lastTotals = { received: summary.packetsReceived, lost: summary.packetsLost };
    const loss = received + lost > 0 ? Math.max(0, lost) / (Math.max(0, received) + Math.max(0, lost)) : 0;
    summary.quality = quality(loss, summary.rttMs, publisher, subscriber);
    return summary;
  }
}

function selectedPair(report: RTCStatsReport): CandidatePairStats | undefined {
  let pair: any; // eslint-disable-line @typescript-eslint/no-explicit-any
  report.forEach((s) => {
    if (s.type === 'transport' && s.selectedCandidatePairId) pair = report.get(s.selectedCandidatePairId);
  });
  if (!pair) {
    // Firefox has no transport stats; it flags the pair instead.
    report.forEach((s) => {
      if (s.type === 'candidate-pair' && (s.selected || (s.nominated && s.state === 'succeeded'))) pair ??= s;
    });
  }
  if (!pair) return undefined;
  const local = report.get(pair.localCandidateId);
  const remote = report.get(pair.remoteCandidateId);
  return {
    localType: local?.candidateType ?? '',
    remoteType: remote?.candidateType ?? '',
    protocol: local?.protocol ?? '',
    rttMs: typeof pair.currentRoundTripTime === 'number' ? pair.currentRoundTripTime * 1000 : undefined,
  };
}

// Quality from what a user notices: no connection, heavy loss or long delay.
function quality(
  loss: number,
  rttMs: number | undefined,
  publisher: RTCPeerConnection | null,
  subscriber: RTCPeerConnection | null,
): ConnectionQuality {
  const states = [publisher?.iceConnectionState, subscriber?.iceConnectionState];
  if (states.some((st) => st === 'failed' || st === 'disconnected' || st === 'closed')) return 'lost';
  if (!states.some((st) => st === 'connected' || st === 'completed')) return 'unknown';
  return qualityOf(loss, rttMs);
}

/** Quality of a connected path from its loss fraction and round trip (shared with WebTransport sessions). */
export function qualityOf(loss: number, rttMs: number | undefined): ConnectionQuality {
  const rtt = rttMs ?? 0;
  if (loss > 0.1 || rtt > 500) return 'poor';
  if (loss > 0.02 || rtt > 200) return 'good';
  return 'excellent';
}
