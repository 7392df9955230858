// The end-to-end encryption worker: encrypts the frames of this participant's
// senders and decrypts those of each remote receiver (SFrame, sframe.ts). One
// worker per room, so one frame counter per key across all local senders (a
// nonce is never reused). Frames come from RTCRtpScriptTransform
// (`rtctransform` events) or as Chromium's encoded streams posted by e2ee.ts.
import { clearBytes, decryptFrame, deriveKey, encryptFrame, frameHeader, passphraseSecret, ratchetSecret, senderSecret, type SFrameKey } from './sframe.js';

interface TransformOptions {
  dir: 'send' | 'recv';
  kind: 'audio' | 'video';
  rid?: number; // receiver id (recv)
}

type In =
  | { type: 'identity'; identity: string }
  | { type: 'setKey'; index: number; secret?: ArrayBuffer; passphrase?: string; send: boolean }
  | { type: 'ratchet'; id: number }
  | { type: 'bind'; rid: number; identity: string }
  | { type: 'streams'; readable: ReadableStream; writable: WritableStream; options: TransformOptions }
  | { type: 'stats'; id: number };

type RecvState = 'ok' | 'decrypt_failed' | 'missing_key';

// A frame's counter at or past a key's first one is fine; later ones need a ratchet
// step per key index: a receiver follows a sender's ratchet up to this many steps.
const MAX_RATCHET = 16;
// Derived keys kept; past this the caches start over (others' frames can name
// any key index, and each would otherwise stay).
const MAX_KEYS = 64;
// A receiver that resumes decrypting on a delta frame asks for a keyframe at most this often.
const KEYFRAME_ASK_MS = 1_000;

interface Transformer {
  readable: ReadableStream;
  writable: WritableStream;
  options: TransformOptions;
  sendKeyFrameRequest?: () => Promise<void>;
}

interface EncodedFrame {
  data: ArrayBuffer;
  type?: string;
}

const scope = self as unknown as {
  postMessage(m: unknown): void;
  onmessage: ((ev: MessageEvent<In>) => void) | null;
  onrtctransform?: (ev: { transformer: Transformer }) => void;
};

let identity = '';
let sendIndex = -1;
// Shared base secrets by key index, and sender secrets by `identity/index`
// (derived from a base, or by ratchet).
const bases = new Map<number, Uint8Array>();
const secrets = new Map<string, Promise<Uint8Array | null>>();
const keys = new Map<string, Promise<SFrameKey | null>>();
// Others' secrets guessed by following their ratchet from a key we hold: a frame
// they do not open names a key we were not given (rotation), not a wrong one.
const guessed = new Set<string>();
// Key indexes asked of the page (its keyProvider), once each until a key comes.
const needed = new Set<number>();

function needKey(index: number): void {
  if (needed.has(index)) return;
  needed.add(index);
  scope.postMessage({ type: 'needKey', index });
}
// Frame counters of our own keys: start at a random point so that a reload
// with the same key does not repeat a nonce.
const counters = new Map<number, number>();
const bound = new Map<number, string>();
const recv = new Map<number, { state: RecvState | ''; failed: number; ok: number; asked: number }>();
const totals = { encrypted: 0, decrypted: 0, failed: 0, dropped: 0 };

function randomStart(): number {
  const r = crypto.getRandomValues(new Uint32Array(2));
  return (r[0] & 0xfffff) * 2 ** 32 + r[1]; // < 2^52: the counter stays an exact number
}

function secretOf(who: string, index: number): Promise<Uint8Array | null> {
  const id = `${who}/${index}`;
  let s = secrets.get(id);
  if (!s) {
    s = (async () => {
      const base = bases.get(index);
      if (base) return senderSecret(base, who);
      // No shared key for this index: the sender may have ratcheted from one we
      // have, one step per index (each step's secret is kept on the way).
      for (let back = 1; back <= MAX_RATCHET && index - back >= 0; back++) {
        if (!bases.has(index - back) && !secrets.has(`${who}/${index - back}`)) continue;
        const prev = await secretOf(who, index - 1);
        if (who !== identity) guessed.add(id);
        return prev && ratchetSecret(prev);
      }
      return null;
    })();
    secrets.set(id, s);
  }
  return s;
}

function keyOf(who: string, index: number): Promise<SFrameKey | null> {
  const id = `${who}/${index}`;
  let k = keys.get(id);
  if (!k && keys.size >= MAX_KEYS) {
    keys.clear();
    // Our own ratcheted secrets cannot be derived again from a base: keep them.
    for (const sid of [...secrets.keys()]) if (!sid.startsWith(`${identity}/`)) secrets.delete(sid);
    guessed.clear();
  }
  if (!k) {
    k = secretOf(who, index).then((s) => (s ? deriveKey(s, index) : null));
    keys.set(id, k);
  }
  return k;
}

function forget(index: number): void {
  // Keys at later indexes may have been ratcheted from the old one.
  for (const m of [secrets, keys, guessed]) for (const id of [...m.keys()]) if (Number(id.split('/').pop()) >= index) m.delete(id);
}

function report(rid: number, ok: boolean, bad: RecvState = 'decrypt_failed'): void {
  let r = recv.get(rid);
  if (!r) recv.set(rid, (r = { state: '', failed: 0, ok: 0, asked: 0 }));
  const state: RecvState = ok ? 'ok' : bad;
  if (ok) r.ok++;
  else r.failed++;
  if (r.state !== state) {
    r.state = state;
    scope.postMessage({ type: 'state', rid, state, failed: r.failed });
  }
}

async function encrypt(frame: EncodedFrame, kind: 'audio' | 'video'): Promise<boolean> {
  if (sendIndex < 0 || !identity) return false;
  const index = sendIndex;
  const k = await keyOf(identity, index);
  if (!k) return false;
  const ctr = counters.get(index) ?? randomStart();
  counters.set(index, ctr + 1);
  const clear = clearBytes(kind, frame.type === 'key');
  frame.data = (await encryptFrame(k, ctr, new Uint8Array(frame.data), clear)).buffer as ArrayBuffer;
  totals.encrypted++;
  return true;
}

async function decrypt(frame: EncodedFrame, kind: 'audio' | 'video', rid: number, t?: Transformer): Promise<boolean> {
  const who = bound.get(rid);
  if (who === undefined) return false; // not yet told whose track this is
  const data = new Uint8Array(frame.data);
  const clear = clearBytes(kind, frame.type === 'key');
  const h = frameHeader(data, clear);
  if (!h) {
    report(rid, false);
    return false;
  }
  const k = await keyOf(who, h.kid);
  if (!k) {
    keys.delete(`${who}/${h.kid}`);
    secrets.delete(`${who}/${h.kid}`);
    report(rid, false, 'missing_key');
    needKey(h.kid);
    return false;
  }
  try {
    frame.data = (await decryptFrame(k, data, clear, h)).buffer as ArrayBuffer;
  } catch {
    const missing = guessed.has(`${who}/${h.kid}`);
    report(rid, false, missing ? 'missing_key' : 'decrypt_failed');
    if (missing) needKey(h.kid);
    return false;
  }
  // Decrypting again after failures (a key arrived): the decoder lost its
  // reference frames with the dropped ones, so ask the sender for a keyframe.
  const r = recv.get(rid);
  if (kind === 'video' && frame.type !== 'key' && r && r.state !== 'ok' && Date.now() - r.asked > KEYFRAME_ASK_MS) {
    r.asked = Date.now();
    t?.sendKeyFrameRequest?.().catch(() => {});
  }
  report(rid, true);
  totals.decrypted++;
  return true;
}

function run(readable: ReadableStream, writable: WritableStream, o: TransformOptions, t?: Transformer): void {
  const transform = new TransformStream<EncodedFrame, EncodedFrame>({
    async transform(frame, ctl) {
      // Empty frames (no payload) carry nothing to protect.
      if (frame.data.byteLength === 0) return ctl.enqueue(frame);
      let ok = false;
      try {
        ok = o.dir === 'send' ? await encrypt(frame, o.kind) : await decrypt(frame, o.kind, o.rid ?? -1, t);
      } catch {
        ok = false;
      }
      // Never send a frame in the clear nor hand the decoder one it cannot read.
      if (ok) ctl.enqueue(frame);
      else if (o.dir === 'send') totals.dropped++;
      else totals.failed++;
    },
  });
  readable
    .pipeThrough(transform)
    .pipeTo(writable)
    .catch(() => {});
}

scope.onrtctransform = (ev) => run(ev.transformer.readable, ev.transformer.writable, ev.transformer.options, ev.transformer);

scope.onmessage = async (ev) => {
  const m = ev.data;
  switch (m.type) {
    case 'identity':
      identity = m.identity;
      break;
    case 'setKey': {
      const secret = m.passphrase !== undefined ? await passphraseSecret(m.passphrase) : new Uint8Array(m.secret ?? new ArrayBuffer(0));
      bases.set(m.index, secret);
      forget(m.index);
      needed.delete(m.index);
      if (m.send) sendIndex = m.index;
      scope.postMessage({ type: 'keySet', index: m.index });
      break;
    }
    case 'ratchet': {
      // Our next key: the ratchet of the current one, under the next index.
      if (sendIndex >= 0 && identity) {
        const next = sendIndex + 1;
        const cur = await secretOf(identity, sendIndex);
        if (cur) {
          forget(next);
          bases.delete(next);
          secrets.set(`${identity}/${next}`, ratchetSecret(cur));
          sendIndex = next;
        }
      }
      scope.postMessage({ type: 'ratcheted', id: m.id, index: sendIndex });
      break;
    }
    case 'bind':
      bound.set(m.rid, m.identity);
      break;
    case 'streams':
      run(m.readable, m.writable, m.options);
      break;
    case 'stats': {
      const receivers: Record<number, { state: string; failed: number; ok: number }> = {};
      for (const [rid, r] of recv) receivers[rid] = { ...r };
      scope.postMessage({ type: 'stats', id: m.id, totals: { ...totals }, receivers, sendIndex });
      break;
    }
  }
};
