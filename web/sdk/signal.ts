// One WebSocket to the server: JSON frames, numbered requests matched to their
// `response`/`error`, and a keepalive ping that notices a dead socket long before
// TCP would.
import {
  type ClientMessage,
  type JoinedMessage,
  type ServerMessage,
  FATAL_CODES,
  PetrelError,
} from './protocol.js';

const REQUEST_TIMEOUT_MS = 10_000;
const PING_INTERVAL_MS = 5_000;
const PING_DEAD_MS = 15_000;

interface Pending {
  resolve: (msg: ServerMessage) => void;
  reject: (err: Error) => void;
  timer: ReturnType<typeof setTimeout>;
}

export interface SignalHandlers {
  message: (msg: ServerMessage) => void;
  // Called once when the socket is gone, unless close() was called.
  lost: (reason: string) => void;
}

export class SignalClient {
  private ws: WebSocket | null = null;
  private nextId = 1;
  private pending = new Map<number, Pending>();
  private pingTimer: ReturnType<typeof setInterval> | null = null;
  private lastPong = 0;
  private closed = false;
  rttMs = 0;

  constructor(private handlers: SignalHandlers) {}

  // Opens the socket and sends `join`; resolves with `joined`.
  async join(url: string, join: Extract<ClientMessage, { type: 'join' }>): Promise<JoinedMessage> {
    const ws = new WebSocket(url);
    this.ws = ws;
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`websocket ${url}: connect timeout`)), REQUEST_TIMEOUT_MS);
      ws.onopen = () => {
        clearTimeout(timer);
        resolve();
      };
      ws.onerror = () => {
        clearTimeout(timer);
        reject(new Error(`websocket ${url}: connection failed`));
      };
    });

    // The server admits us to the room before it answers `joined`: whoever
    // joins (or publishes) in between is announced to us first. Those messages
    // follow `joined`, once the caller has taken it in (its code up to its first
    // await runs before a timer task), in order with what comes after. Dropped,
    // a participant joining at the same moment was never known: in a drain
    // where both move at once, the new node's session of the other was missing,
    // the move waited its 4 s for that video, and then dropped the other's tile.
    const early: unknown[] = [];
    const joined = new Promise<JoinedMessage>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('join: no reply from server')), REQUEST_TIMEOUT_MS);
      ws.onmessage = (ev) => {
        const msg = parse(ev.data);
        if (!msg) return;
        if (msg.type === 'joined') {
          clearTimeout(timer);
          if (early.length === 0) ws.onmessage = (e) => this.onFrame(e.data);
          else {
            ws.onmessage = (e) => early.push(e.data);
            setTimeout(() => {
              if (this.ws !== ws) return;
              ws.onmessage = (e) => this.onFrame(e.data);
              for (const data of early.splice(0)) this.onFrame(data);
            }, 0);
          }
          resolve(msg);
        } else if (msg.type === 'error' || msg.type === 'leave') {
          clearTimeout(timer);
          reject(
            msg.type === 'error' ? new PetrelError(msg.code, msg.message) : new PetrelError(msg.reason, msg.message),
          );
        } else early.push(ev.data);
      };
      ws.onclose = (ev) => {
        clearTimeout(timer);
        reject(new PetrelError('closed', `join: socket closed (${ev.code} ${ev.reason})`));
      };
    });
    this.sendRaw(join);
    const msg = await joined;

    ws.onclose = (ev) => this.onClose(`socket closed (${ev.code}${ev.reason ? ' ' + ev.reason : ''})`);
    ws.onerror = () => {};
    this.lastPong = Date.now();
    this.pingTimer = setInterval(() => this.keepalive(), PING_INTERVAL_MS);
    return msg;
  }

  send(msg: ClientMessage): void {
    this.sendRaw(msg);
  }

  // Sends a message with an id and waits for the reply carrying the same id.
  request(msg: ClientMessage): Promise<ServerMessage> {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new Error(`${msg.type}: no reply in ${REQUEST_TIMEOUT_MS} ms`));
      }, REQUEST_TIMEOUT_MS);
      this.pending.set(id, { resolve, reject, timer });
      try {
        this.sendRaw({ ...msg, id });
      } catch (err) {
        clearTimeout(timer);
        this.pending.delete(id);
        reject(err as Error);
      }
    });
  }

  get open(): boolean {
    return this.ws?.readyState === WebSocket.OPEN;
  }

  // Drops the socket as a network failure would: `lost` is reported and the room
  // resumes. For testing reconnection from a real page.
  drop(): void {
    this.ws?.close(4000, 'dropped by client');
  }

  // Closes without reporting `lost`: the caller chose to leave (or is replacing us).
  close(): void {
    this.closed = true;
    this.stop('closed');
    if (this.ws && this.ws.readyState <= WebSocket.OPEN) this.ws.close(1000);
  }

  private sendRaw(msg: object): void {
    if (!this.ws || this.ws.readyState !== WebSocket.OPEN) throw new Error('signal: socket not open');
    this.ws.send(JSON.stringify(msg));
  }

  private onFrame(data: unknown): void {
    const msg = parse(data);
    if (!msg) return;
    if (msg.type === 'pong') {
      this.lastPong = Date.now();
      if (typeof msg.t === 'number') this.rttMs = Date.now() - msg.t;
      return;
    }
    if ((msg.type === 'response' || msg.type === 'error' || msg.type === 'answer') && typeof msg.id === 'number') {
      const p = this.pending.get(msg.id);
      if (p) {
        this.pending.delete(msg.id);
        clearTimeout(p.timer);
        if (msg.type === 'error') p.reject(new PetrelError(msg.code, msg.message));
        else p.resolve(msg);
        // An answer is also handed to the room, which may be waiting for it without an id.
        if (msg.type !== 'answer') return;
      }
    }
    this.handlers.message(msg);
    if (msg.type === 'error' && FATAL_CODES.has(msg.code)) this.ws?.close();
  }

  private keepalive(): void {
    if (Date.now() - this.lastPong > PING_DEAD_MS) {
      // The socket looks open but nothing comes back (e.g. a silent network change).
      this.ws?.close();
      this.onClose('ping timeout');
      return;
    }
    try {
      this.sendRaw({ type: 'ping', t: Date.now() });
    } catch {
      /* onclose follows */
    }
  }

  private onClose(reason: string): void {
    if (this.closed) return;
    this.closed = true;
    this.stop(reason);
    this.handlers.lost(reason);
  }

  private stop(reason: string): void {
    if (this.pingTimer) clearInterval(this.pingTimer);
    this.pingTimer = null;
    for (const [, p] of this.pending) {
      clearTimeout(p.timer);
      p.reject(new PetrelError('closed', `signal: ${reason}`));
    }
    this.pending.clear();
  }
}

function parse(data: unknown): ServerMessage | null {
  if (typeof data !== 'string') return null;
  try {
    const msg = JSON.parse(data) as ServerMessage;
    return msg && typeof msg === 'object' && typeof msg.type === 'string' ? msg : null;
  } catch {
    return null;
  }
}
