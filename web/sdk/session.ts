// Signaling of one session on one node: the socket (signal.ts) and the two
// transports that negotiate over it. Offers, answers and candidates go to the
// transport they are for; every other server message goes to the handlers. A
// room has one session; a move to another node builds a second one with the
// same code and adopts it (move.ts).
import { PublisherTransport, type SignalPort } from './publisher.js';
import { SubscriberTransport } from './subscriber.js';
import { IceWatch } from './reconnect.js';
import { SignalClient, type SignalHandlers } from './signal.js';
import type { ClientMessage, JoinedMessage, PcTarget, ServerMessage } from './protocol.js';

export interface SessionHandlers {
  /** A server message that is not for a transport. */
  message(msg: ServerMessage): void;
  /** The socket is gone (not closed by us). */
  lost(reason: string): void;
  /** A server offer could not be answered. */
  subscriberFailed(err: unknown): void;
}

/** The socket as the session uses it (SignalClient, or a fake in unit tests). */
export interface Signal extends SignalPort {
  join(url: string, join: Extract<ClientMessage, { type: 'join' }>): Promise<JoinedMessage>;
  readonly open: boolean;
  drop(): void;
  close(): void;
}

export interface SessionDeps {
  newSignal(h: SignalHandlers): Signal;
  newPc(config: RTCConfiguration): RTCPeerConnection;
  newStream(): MediaStream;
}

const browserDeps: SessionDeps = {
  newSignal: (h) => new SignalClient(h),
  newPc: (c) => new RTCPeerConnection(c),
  newStream: () => new MediaStream(),
};

export class Session implements SignalPort {
  publisher: PublisherTransport | null = null;
  subscriber: SubscriberTransport | null = null;
  /** Called with each transport pair as it is made (end-to-end encryption hooks in). */
  onTransports: (pub: PublisherTransport, sub: SubscriberTransport) => void = () => {};
  private signal: Signal | null = null;
  private ice: IceWatch;

  constructor(
    private handlers: SessionHandlers,
    /** Whether ICE restarts are wanted (the room is connected on this session). */
    iceActive: () => boolean,
    private deps: SessionDeps = browserDeps,
  ) {
    this.ice = new IceWatch(iceActive, (target) => this.restartIce(target));
  }

  /** Hands the server's messages to other handlers from now on (a move adopts this session). */
  setHandlers(h: SessionHandlers): void {
    this.handlers = h;
  }

  /** A socket exists (open, or dropped and being resumed). */
  get hasSignal(): boolean {
    return !!this.signal;
  }

  get open(): boolean {
    return !!this.signal?.open;
  }

  /**
   * Opens a socket and joins (or resumes); a previous socket is closed, the
   * transports stay (a resume keeps them and restarts ICE).
   */
  async join(url: string, join: Extract<ClientMessage, { type: 'join' }>): Promise<JoinedMessage> {
    this.signal?.close();
    const signal = this.deps.newSignal({
      message: (msg) => {
        if (this.signal === signal) this.route(msg);
      },
      lost: (reason) => {
        if (this.signal === signal) this.handlers.lost(reason);
      },
    });
    this.signal = signal;
    try {
      return await signal.join(url, join);
    } catch (err) {
      signal.close();
      throw err;
    }
  }

  send(msg: ClientMessage): void {
    if (!this.signal) throw new Error('signal: not connected');
    this.signal.send(msg);
  }

  request(msg: ClientMessage): Promise<ServerMessage> {
    if (!this.signal) return Promise.reject(new Error(`${msg.type}: not connected`));
    return this.signal.request(msg);
  }

  /** Tells the server we leave; an already closed socket is fine. */
  leave(): void {
    try {
      this.signal?.send({ type: 'leave' });
    } catch {
      /* already gone */
    }
  }

  /** Drops the socket as a network failure would (the handlers hear `lost`). */
  drop(): void {
    this.signal?.drop();
  }

  /** Closes the socket without reporting it lost. */
  closeSignal(): void {
    this.signal?.close();
  }

  /** Makes a new pair of transports (closing any old pair). */
  createTransports(config: RTCConfiguration): void {
    this.closeTransports();
    const port: SignalPort = { send: (m) => this.send(m), request: (m) => this.request(m) };
    const pub = new PublisherTransport(this.deps.newPc(config), port, this.deps.newStream());
    const sub = new SubscriberTransport(this.deps.newPc(config), (m) => this.send(m));
    for (const [pc, target] of [
      [pub.pc, 'publisher'],
      [sub.pc, 'subscriber'],
    ] as const) {
      pc.onicecandidate = (ev) => this.trickle(target, ev.candidate);
      this.ice.watch(pc, target);
    }
    this.publisher = pub;
    this.subscriber = sub;
    this.onTransports(pub, sub);
  }

  /** New ICE servers (fresh TURN credentials) for the next restart. */
  setConfiguration(config: RTCConfiguration): void {
    this.publisher?.pc.setConfiguration(config);
    this.subscriber?.pc.setConfiguration(config);
  }

  /** Restarts ICE of one transport: the publisher by offering, the subscriber by asking the server. */
  restartIce(target: PcTarget): void {
    if (!this.open) return;
    const done =
      target === 'publisher'
        ? this.publisher?.negotiate({ iceRestart: true })
        : this.request({ type: 'restartIce' });
    done?.catch((err) => console.warn(`petrel: ICE restart of ${target} failed`, err));
  }

  closeTransports(): void {
    this.ice.stop();
    this.publisher?.close();
    this.subscriber?.close();
    this.publisher = this.subscriber = null;
  }

  close(): void {
    const signal = this.signal;
    this.signal = null;
    signal?.close();
    this.closeTransports();
  }

  private route(msg: ServerMessage): void {
    switch (msg.type) {
      case 'answer':
        this.publisher?.onAnswer(msg.sdp);
        return;
      case 'offer':
        this.subscriber?.onOffer(msg.sdp).catch((err) => this.handlers.subscriberFailed(err));
        return;
      case 'trickle':
        void (msg.target === 'publisher' ? this.publisher : this.subscriber)?.addCandidate(msg.candidate);
        return;
      default:
        this.handlers.message(msg);
    }
  }

  private trickle(target: PcTarget, c: RTCIceCandidate | null): void {
    try {
      this.send({ type: 'trickle', target, candidate: c ? c.toJSON() : null });
    } catch {
      // The socket is down; the ICE restart after resuming gathers candidates again.
    }
  }
}
