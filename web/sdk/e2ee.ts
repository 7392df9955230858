// End-to-end encryption of a room's media (docs/e2ee.md): the main-thread side.
// It runs the SFrame worker (e2ee-worker.ts, inlined into the bundle), hands it
// keys, and attaches it to every sender and receiver of the room's connections,
// through RTCRtpScriptTransform where the browser has it, else through
// Chromium's encoded insertable streams.

// The worker's bundled source, put in by build.mjs.
declare const __E2EE_WORKER__: string;

export interface E2EEOptions {
  /** A passphrase shared by everyone in the room; the key is derived from it (PBKDF2). */
  passphrase?: string;
  /**
   * The application's keys instead of a passphrase: the shared secret (16 bytes
   * or more) of key index `index`. Asked for the starting index at connect, and
   * again whenever a frame names an index this room has no key for.
   */
  keyProvider?: (index: number) => BufferSource | Promise<BufferSource>;
  /** The key index to start sending with (default 0). */
  keyIndex?: number;
  /** Which browser API carries the frames: 'auto' (default) prefers RTCRtpScriptTransform. */
  transform?: 'auto' | 'script' | 'streams';
}

/** A remote track's decryption state: 'ok' once frames decrypt, otherwise why they do not. */
export type E2EEState = 'ok' | 'decrypt_failed' | 'missing_key';

export interface E2EEStats {
  /** Frames encrypted by our senders, decrypted from others, failed to decrypt, dropped before sending (no key). */
  totals: { encrypted: number; decrypted: number; failed: number; dropped: number };
  sendIndex: number;
}

type Api = 'script' | 'streams';

interface ScriptTransformCtor {
  new (worker: Worker, options?: unknown, transfer?: unknown[]): unknown;
}

function scriptTransform(): ScriptTransformCtor | undefined {
  return (globalThis as { RTCRtpScriptTransform?: ScriptTransformCtor }).RTCRtpScriptTransform;
}

function hasStreams(): boolean {
  return typeof RTCRtpSender !== 'undefined' && 'createEncodedStreams' in RTCRtpSender.prototype;
}

/** Whether this browser can encrypt media end to end (an encoded transform API and WebCrypto). */
export function e2eeSupported(): boolean {
  return !!globalThis.crypto?.subtle && (!!scriptTransform() || hasStreams());
}

function pickApi(want: E2EEOptions['transform']): Api {
  const script = !!scriptTransform();
  const streams = hasStreams();
  if (want === 'script' && script) return 'script';
  if (want === 'streams' && streams) return 'streams';
  if (want && want !== 'auto') throw new Error(`e2ee: this browser has no ${want} transform`);
  if (script) return 'script';
  if (streams) return 'streams';
  throw new Error('e2ee: this browser has no encoded transform API (RTCRtpScriptTransform or encoded streams)');
}

interface Transformable {
  transform?: unknown;
  createEncodedStreams?: () => { readable: ReadableStream; writable: WritableStream };
}

export class E2EE {
  readonly api: Api;
  /** Called when a receiver's decryption state changes (rid from attachReceiver). */
  onState: (rid: number, state: E2EEState, failed: number) => void = () => {};
  private worker: Worker;
  private url: string;
  private attached = new WeakMap<object, number>();
  private nextRid = 1;
  private nextReq = 1;
  private pending = new Map<number, (m: unknown) => void>();
  private keyIndex: number;

  constructor(private opts: E2EEOptions) {
    if (!opts.passphrase && !opts.keyProvider) throw new Error('e2ee: give a passphrase or a keyProvider');
    this.api = pickApi(opts.transform);
    this.keyIndex = opts.keyIndex ?? 0;
    this.url = URL.createObjectURL(new Blob([__E2EE_WORKER__], { type: 'text/javascript' }));
    this.worker = new Worker(this.url, { name: 'petrel-e2ee' });
    this.worker.onmessage = (ev) => this.onWorker(ev.data);
  }

  /** Whether the peer connections need `encodedInsertableStreams` (Chromium's older API). */
  get needsInsertableStreams(): boolean {
    return this.api === 'streams';
  }

  /** Loads the starting key (before joining: deriving it takes a moment). */
  async start(): Promise<void> {
    if (this.opts.passphrase !== undefined) await this.setKey(this.opts.passphrase, this.keyIndex);
    else await this.provide(this.keyIndex, true);
  }

  /** Who we are: our sender key derives from it. Frames are sent only once it is known. */
  setIdentity(identity: string): void {
    this.worker.postMessage({ type: 'identity', identity });
  }

  /**
   * Loads a key (a passphrase string, or the raw shared secret) under `index`
   * and, unless `send` is false, encrypts from now on with it. Rotation: give
   * everyone the new key with a new index; each decrypts old frames with the
   * old key until its senders switch.
   */
  async setKey(key: string | BufferSource, index: number, opts: { send?: boolean } = {}): Promise<void> {
    if (!Number.isSafeInteger(index) || index < 0) throw new Error('e2ee: key index must be a non-negative integer');
    const send = opts.send ?? true;
    const msg =
      typeof key === 'string'
        ? { type: 'setKey', index, passphrase: key, send }
        : { type: 'setKey', index, secret: toBuffer(key), send };
    const done = this.wait((m) => (m as { type: string; index: number }).type === 'keySet' && (m as { index: number }).index === index);
    this.worker.postMessage(msg);
    await done;
    if (send) this.keyIndex = index;
  }

  /**
   * Ratchets our sending key forward (HKDF of the current one, next index):
   * receivers follow by themselves, and whoever is given the new key cannot
   * derive the old ones. Resolves with the new index.
   */
  async ratchetKey(): Promise<number> {
    const id = this.nextReq++;
    const done = this.wait((m) => (m as { type: string; id: number }).type === 'ratcheted' && (m as { id: number }).id === id);
    this.worker.postMessage({ type: 'ratchet', id });
    const m = (await done) as { index: number };
    this.keyIndex = m.index;
    return m.index;
  }

  /** Counters of the worker, for diagnostics and tests. */
  async stats(): Promise<E2EEStats> {
    const id = this.nextReq++;
    const done = this.wait((m) => (m as { type: string; id: number }).type === 'stats' && (m as { id: number }).id === id);
    this.worker.postMessage({ type: 'stats', id });
    return (await done) as E2EEStats;
  }

  /** Encrypts what `sender` sends. */
  attachSender(sender: RTCRtpSender, kind: string): void {
    this.attach(sender as unknown as Transformable, { dir: 'send', kind });
  }

  /** Decrypts what `receiver` receives once bound to a participant; returns its id. */
  attachReceiver(receiver: RTCRtpReceiver): number {
    const known = this.attached.get(receiver);
    if (known !== undefined) return known;
    const rid = this.nextRid++;
    this.attach(receiver as unknown as Transformable, { dir: 'recv', kind: receiver.track.kind, rid });
    return rid;
  }

  /** Tells the worker whose frames `receiver` carries (the sender key to use). */
  bind(receiver: RTCRtpReceiver, identity: string): number {
    const rid = this.attachReceiver(receiver);
    this.worker.postMessage({ type: 'bind', rid, identity });
    return rid;
  }

  close(): void {
    this.worker.terminate();
    URL.revokeObjectURL(this.url);
    for (const resolve of this.pending.values()) resolve(undefined);
    this.pending.clear();
  }

  private attach(t: Transformable, options: { dir: 'send' | 'recv'; kind: string; rid?: number }): void {
    if (this.attached.has(t)) return;
    this.attached.set(t, options.rid ?? 0);
    if (this.api === 'script') {
      const Ctor = scriptTransform();
      if (Ctor) t.transform = new Ctor(this.worker, options);
      return;
    }
    const { readable, writable } = t.createEncodedStreams!();
    this.worker.postMessage({ type: 'streams', readable, writable, options }, [readable as unknown as Transferable, writable as unknown as Transferable]);
  }

  private async provide(index: number, send: boolean): Promise<void> {
    const provider = this.opts.keyProvider;
    if (!provider) return;
    const secret = await provider(index);
    await this.setKey(secret, index, { send });
  }

  private wait(match: (m: unknown) => boolean): Promise<unknown> {
    const id = this.nextReq++;
    return new Promise((resolve) => {
      this.pending.set(id, (m) => {
        if (m === undefined || match(m)) {
          this.pending.delete(id);
          resolve(m);
        }
      });
    });
  }

  private onWorker(m: { type: string; rid?: number; state?: E2EEState; failed?: number; index?: number }): void {
    if (m.type === 'state' && m.rid !== undefined && m.state) this.onState(m.rid, m.state, m.failed ?? 0);
    if (m.type === 'needKey' && m.index !== undefined && this.opts.keyProvider) {
      this.provide(m.index, false).catch((err) => console.warn('petrel: e2ee keyProvider failed', err));
    }
    for (const resolve of [...this.pending.values()]) resolve(m);
  }
}

function toBuffer(b: BufferSource): ArrayBuffer {
  const u = b instanceof ArrayBuffer ? new Uint8Array(b) : new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
  return u.slice().buffer as ArrayBuffer;
}
