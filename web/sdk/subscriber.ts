// The subscriber transport: the peer connection the server offers on, carrying
// everyone else's tracks and the server's data channels. Offers are answered one
// at a time; media sections this browser cannot decode are declined. What arrives
// is held until a consumer attaches (a room at once, a move when it switches).
import { CandidateBuffer, TaskQueue } from './negotiation.js';
import { type MsidInfo, msidByMid, rejectUndecodable } from './sdp.js';
import { negotiateDependencyDescriptor } from './svc.js';
import type { ClientMessage } from './protocol.js';

export type ReceiveCodecs = (kind: 'audio' | 'video') => RTCRtpCodec[] | undefined;

const browserReceiveCodecs: ReceiveCodecs = (kind) => globalThis.RTCRtpReceiver?.getCapabilities?.(kind)?.codecs;

/** Where the subscriber's arrivals go. */
export interface SubscriberSink {
  track(ev: RTCTrackEvent): void;
  channel(ch: RTCDataChannel): void;
  /** The media section `mid` was declined: this browser cannot decode its codec. */
  unsupported(mid: string): void;
}

export class SubscriberTransport {
  /** Track and participant (msid) of each media section of the current offer. */
  mids = new Map<string, MsidInfo>();
  /** Called with each track's receiver as it arrives, before frames flow (end-to-end encryption). */
  onReceiver: (receiver: RTCRtpReceiver) => void = () => {};
  // Media sections declined because this browser cannot decode them.
  private rejected = new Set<string>();
  private queue = new TaskQueue();
  private candidates: CandidateBuffer;
  private sink: SubscriberSink | null = null;
  private heldTracks: RTCTrackEvent[] = [];
  private heldChannels: RTCDataChannel[] = [];

  constructor(
    readonly pc: RTCPeerConnection,
    private send: (msg: ClientMessage) => void,
    private receiveCodecs: ReceiveCodecs = browserReceiveCodecs,
  ) {
    this.candidates = new CandidateBuffer(() => this.pc);
    pc.ontrack = (ev) => {
      // At once: Chromium's encoded streams must be taken before frames arrive.
      this.onReceiver(ev.receiver);
      if (this.sink) this.sink.track(ev);
      else this.heldTracks.push(ev);
    };
    pc.ondatachannel = (ev) => {
      if (this.sink) this.sink.channel(ev.channel);
      else this.heldChannels.push(ev.channel);
    };
  }

  /** Starts delivering to `sink`, first what arrived before. */
  attach(sink: SubscriberSink): void {
    this.sink = sink;
    for (const ch of this.heldChannels.splice(0)) sink.channel(ch);
    for (const ev of this.heldTracks.splice(0)) sink.track(ev);
  }

  /** Answers a server offer after those before it. */
  onOffer(sdp: string): Promise<void> {
    return this.queue.run(() => this.round(sdp));
  }

  addCandidate(c: RTCIceCandidateInit | null): Promise<void> {
    return this.candidates.add(c);
  }

  /** Resolves once the offers received so far are answered. */
  settled(): Promise<void> {
    return this.queue.run(async () => {});
  }

  close(): void {
    this.candidates.clear();
    this.pc.close();
  }

  private async round(sdp: string): Promise<void> {
    const pc = this.pc;
    if (pc.signalingState === 'closed') return;
    const offer = rejectUndecodable(sdp, this.rejected, this.receiveCodecs);
    // Before setRemoteDescription, because ontrack fires inside it.
    this.mids = msidByMid(offer.sdp);
    await pc.setRemoteDescription({ type: 'offer', sdp: offer.sdp });
    // AV1 SVC arrives with its dependency descriptor only if the answer takes it.
    for (const t of pc.getTransceivers()) if (t.receiver.track.kind === 'video') negotiateDependencyDescriptor(t);
    await this.candidates.flush();
    const answer = await pc.createAnswer();
    await pc.setLocalDescription(answer);
    this.send({ type: 'answer', sdp: answer.sdp ?? '' });
    for (const mid of offer.newly) this.sink?.unsupported(mid);
  }
}
