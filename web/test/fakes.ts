// Stand-ins for the browser's WebRTC objects, which Node does not have: just
// enough of RTCPeerConnection, transceivers and data channels to drive the SDK's
// transport modules and record what they asked for. Real-browser coverage of
// the same paths is in test/browser.
/* eslint-disable @typescript-eslint/no-explicit-any */

export class FakeTrack {
  enabled = true;
  readyState = 'live';
  constructor(
    public kind: string,
    public id = `${kind}-${Math.random().toString(36).slice(2, 8)}`,
    public label = '',
  ) {}
  getSettings(): { width?: number; height?: number } {
    return this.kind === 'video' ? { width: 640, height: 360 } : {};
  }
  clone(): FakeTrack {
    return new FakeTrack(this.kind);
  }
  stop(): void {
    this.readyState = 'ended';
  }
  addEventListener(): void {}
}

export class FakeSender {
  replaced: unknown[] = [];
  params: { encodings: any[]; codecs: any[] } = { encodings: [{}], codecs: [] };
  constructor(public track: unknown = null) {}
  async replaceTrack(t: unknown): Promise<void> {
    this.track = t;
    this.replaced.push(t);
  }
  getParameters(): any {
    return structuredClone(this.params);
  }
  async setParameters(p: any): Promise<void> {
    this.params = p;
  }
}

export class FakeTransceiver {
  direction = 'sendrecv';
  sender: FakeSender;
  receiver: { track: { kind: string } };
  init: any;
  constructor(
    kind: string,
    public mid: string | null,
    track: unknown = null,
  ) {
    this.sender = new FakeSender(track);
    this.receiver = { track: { kind } };
  }
  setCodecPreferences(): void {}
}

export class FakeChannel {
  readyState = 'open';
  binaryType = 'blob';
  onmessage: ((ev: { data: unknown }) => void) | null = null;
  sent: unknown[] = [];
  constructor(public label: string) {}
  send(d: unknown): void {
    this.sent.push(d);
  }
  addEventListener(): void {}
}

export class FakePc {
  signalingState = 'stable';
  iceGatheringState = 'complete';
  connectionState = 'new';
  iceConnectionState = 'new';
  localDescription: { type: string; sdp?: string } | null = null;
  remoteDescription: { type: string; sdp?: string } | null = null;
  transceivers: FakeTransceiver[] = [];
  channels: FakeChannel[] = [];
  calls: string[] = [];
  candidates: unknown[] = [];
  failSetRemote?: Error;
  /** The media sections the next remote offer brings. */
  offeredKinds: string[] = [];
  offerSdp = 'v=0\r\n';
  ontrack: any = null;
  onconnectionstatechange: any = null;
  onicecandidate: any = null;
  oniceconnectionstatechange: any = null;
  ondatachannel: any = null;
  constructor(public config?: unknown) {}
  addTransceiver(what: string | FakeTrack, init?: any): FakeTransceiver {
    const kind = typeof what === 'string' ? what : what.kind;
    const t = new FakeTransceiver(kind, String(this.transceivers.length), typeof what === 'string' ? null : what);
    t.direction = init?.direction ?? 'sendrecv';
    t.init = init;
    this.transceivers.push(t);
    return t;
  }
  getTransceivers(): FakeTransceiver[] {
    return this.transceivers;
  }
  async createOffer(o?: { iceRestart?: boolean }): Promise<{ type: string; sdp: string }> {
    this.calls.push(o?.iceRestart ? 'createOffer:restart' : 'createOffer');
    return { type: 'offer', sdp: this.offerSdp };
  }
  async createAnswer(): Promise<{ type: string; sdp: string }> {
    return { type: 'answer', sdp: 'answer-sdp' };
  }
  async setLocalDescription(d: { type: string; sdp?: string }): Promise<void> {
    this.calls.push(`setLocal:${d.type}`);
    if (d.type === 'rollback') {
      this.localDescription = null;
      this.signalingState = 'stable';
      return;
    }
    this.localDescription = d;
    this.signalingState = d.type === 'offer' ? 'have-local-offer' : 'stable';
  }
  async setRemoteDescription(d: { type: string; sdp?: string }): Promise<void> {
    this.calls.push(`setRemote:${d.type}`);
    if (this.failSetRemote) throw this.failSetRemote;
    this.remoteDescription = d;
    this.signalingState = d.type === 'offer' ? 'have-remote-offer' : 'stable';
    // A remote offer's sections become transceivers, as in a browser.
    if (d.type === 'offer') for (const kind of this.offeredKinds.splice(0)) this.transceivers.push(new FakeTransceiver(kind, String(this.transceivers.length)));
  }
  async addIceCandidate(c: unknown): Promise<void> {
    this.calls.push('candidate');
    this.candidates.push(c);
  }
  createDataChannel(label: string): FakeChannel {
    const ch = new FakeChannel(label);
    this.channels.push(ch);
    return ch;
  }
  removeTrack(sender: FakeSender): void {
    sender.track = null;
  }
  setConfiguration(c: unknown): void {
    this.config = c;
  }
  async getStats(): Promise<Map<string, unknown>> {
    return new Map();
  }
  close(): void {
    this.signalingState = 'closed';
    this.connectionState = 'closed';
  }
  addEventListener(): void {}
  setConnectionState(s: string): void {
    this.connectionState = s;
    this.onconnectionstatechange?.();
  }
}

/** Lets pending promise callbacks run. */
export async function settle(rounds = 10): Promise<void> {
  for (let i = 0; i < rounds; i++) await new Promise<void>((r) => setImmediate(r));
}

export const asPc = (pc: FakePc): RTCPeerConnection => pc as unknown as RTCPeerConnection;
