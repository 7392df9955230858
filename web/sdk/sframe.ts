// SFrame (RFC 9605) with cipher suite AES_128_GCM_SHA256_128, as Petrel's
// end-to-end encryption uses it: key derivation, the header and the per-frame
// AEAD. Pure WebCrypto, shared by the transform worker and the unit tests.
//
// A protected frame is [clear prefix][SFrame header][ciphertext][16-byte tag]:
// the codec's first bytes stay readable so that the SFU can find keyframes
// (docs/e2ee.md); the AEAD authenticates them with the header.

/** RFC 9605 cipher suite 0x0004: AES_128_GCM_SHA256_128. */
export const CIPHER_SUITE = 0x0004;
const NK = 16; // key bytes
const NN = 12; // nonce bytes
export const TAG_BYTES = 16;
// Our own labels, for the steps RFC 9605 leaves to the application.
const PETREL_SALT = 'petrel-e2ee-v1';
const PBKDF2_ITERATIONS = 100_000;

const utf8 = new TextEncoder();

/** The AES key and nonce salt of one sender's key id. */
export interface SFrameKey {
  kid: number;
  key: CryptoKey;
  salt: Uint8Array;
}

/** The parsed SFrame header of a protected frame. */
export interface SFrameHeader {
  kid: number;
  ctr: number;
  /** Header length in bytes. */
  length: number;
}

// Copies into a fresh ArrayBuffer: WebCrypto's BufferSource typing wants one.
function buf(b: Uint8Array): ArrayBuffer {
  return b.slice().buffer as ArrayBuffer;
}

/** The base secret of a passphrase: PBKDF2-SHA-256, 100 000 iterations, 32 bytes. */
export async function passphraseSecret(passphrase: string): Promise<Uint8Array> {
  const k = await crypto.subtle.importKey('raw', buf(utf8.encode(passphrase)), 'PBKDF2', false, ['deriveBits']);
  const bits = await crypto.subtle.deriveBits(
    { name: 'PBKDF2', hash: 'SHA-256', salt: buf(utf8.encode(PETREL_SALT)), iterations: PBKDF2_ITERATIONS },
    k,
    256,
  );
  return new Uint8Array(bits);
}

async function hkdf(ikm: Uint8Array, salt: Uint8Array, info: Uint8Array, bytes: number): Promise<Uint8Array> {
  const k = await crypto.subtle.importKey('raw', buf(ikm), 'HKDF', false, ['deriveBits']);
  return new Uint8Array(await crypto.subtle.deriveBits({ name: 'HKDF', hash: 'SHA-256', salt: buf(salt), info: buf(info) }, k, bytes * 8));
}

/** One participant's secret: HKDF-SHA-256 of the shared base secret and its identity. */
export function senderSecret(base: Uint8Array, identity: string): Promise<Uint8Array> {
  return hkdf(base, utf8.encode(PETREL_SALT), utf8.encode(`sender ${identity}`), 32);
}

/** The next secret of a sender's ratchet: whoever has a secret can derive the later ones, not the earlier. */
export function ratchetSecret(secret: Uint8Array): Promise<Uint8Array> {
  return hkdf(secret, utf8.encode(PETREL_SALT), utf8.encode('ratchet'), 32);
}

function uint(v: number, bytes: number): Uint8Array {
  const out = new Uint8Array(bytes);
  for (let i = bytes - 1; i >= 0; i--) {
    out[i] = v % 256;
    v = Math.floor(v / 256);
  }
  return out;
}

function label(text: string, kid: number): Uint8Array {
  const t = utf8.encode(text);
  const out = new Uint8Array(t.length + 10);
  out.set(t);
  out.set(uint(kid, 8), t.length);
  out.set(uint(CIPHER_SUITE, 2), t.length + 8);
  return out;
}

/** RFC 9605 §4.4.2: sframe_key and sframe_salt of a key id from its base key (here a sender secret). */
export async function deriveKey(secret: Uint8Array, kid: number): Promise<SFrameKey> {
  const none = new Uint8Array(0);
  const raw = await hkdf(secret, none, label('SFrame 1.0 Secret key ', kid), NK);
  const salt = await hkdf(secret, none, label('SFrame 1.0 Secret salt ', kid), NN);
  const key = await crypto.subtle.importKey('raw', buf(raw), 'AES-GCM', false, ['encrypt', 'decrypt']);
  return { kid, key, salt };
}

function minBytes(v: number): number {
  let n = 1;
  while (v >= 256 ** n) n++;
  return n;
}

/** The SFrame header |X|K|Y|C| with KID and CTR, values under 8 inline (RFC 9605 §4.3). */
export function encodeHeader(kid: number, ctr: number): Uint8Array {
  const kb = kid < 8 ? 0 : minBytes(kid);
  const cb = ctr < 8 ? 0 : minBytes(ctr);
  const out = new Uint8Array(1 + kb + cb);
  out[0] = (kb ? 0x80 | ((kb - 1) << 4) : kid << 4) | (cb ? 0x08 | (cb - 1) : ctr);
  if (kb) out.set(uint(kid, kb), 1);
  if (cb) out.set(uint(ctr, cb), 1 + kb);
  return out;
}

// Values above 2^53 do not fit a JS number; no Petrel sender makes them.
function readUint(b: Uint8Array, off: number, n: number): number | null {
  if (n > 7) return null;
  let v = 0;
  for (let i = 0; i < n; i++) v = v * 256 + b[off + i];
  return Number.isSafeInteger(v) ? v : null;
}

/** Parses the SFrame header at `off`; null if it does not fit. */
export function parseHeader(b: Uint8Array, off = 0): SFrameHeader | null {
  if (b.length <= off) return null;
  const c0 = b[off];
  let i = off + 1;
  let kid = (c0 >> 4) & 0x07;
  if (c0 & 0x80) {
    const n = kid + 1;
    if (b.length < i + n) return null;
    const v = readUint(b, i, n);
    if (v === null) return null;
    kid = v;
    i += n;
  }
  let ctr = c0 & 0x07;
  if (c0 & 0x08) {
    const n = ctr + 1;
    if (b.length < i + n) return null;
    const v = readUint(b, i, n);
    if (v === null) return null;
    ctr = v;
    i += n;
  }
  return { kid, ctr, length: i - off };
}

function nonce(salt: Uint8Array, ctr: number): Uint8Array {
  const n = salt.slice();
  const c = uint(ctr, 8);
  for (let i = 0; i < 8; i++) n[NN - 8 + i] ^= c[i];
  return n;
}

/**
 * Protects a frame: the first `clear` bytes stay as they are, the rest is sealed
 * under `k` with counter `ctr`. A frame shorter than its prefix is refused: the
 * receiver could not tell where the header starts (no VP8 or Opus frame is).
 */
export async function encryptFrame(k: SFrameKey, ctr: number, frame: Uint8Array, clear: number): Promise<Uint8Array> {
  if (frame.length < clear) throw new Error('sframe: frame shorter than its clear prefix');
  const n = clear;
  const header = encodeHeader(k.kid, ctr);
  const aad = new Uint8Array(n + header.length);
  aad.set(frame.subarray(0, n));
  aad.set(header, n);
  const sealed = new Uint8Array(
    await crypto.subtle.encrypt({ name: 'AES-GCM', iv: buf(nonce(k.salt, ctr)), additionalData: buf(aad), tagLength: TAG_BYTES * 8 }, k.key, buf(frame.subarray(n))),
  );
  const out = new Uint8Array(aad.length + sealed.length);
  out.set(aad);
  out.set(sealed, aad.length);
  return out;
}

/** The header of a protected frame with `clear` bytes in front, or null if it cannot be one. */
export function frameHeader(frame: Uint8Array, clear: number): SFrameHeader | null {
  const h = parseHeader(frame, clear);
  return h && frame.length >= clear + h.length + TAG_BYTES ? h : null;
}

/** Opens a protected frame whose header is `h`; rejects when the key is wrong or the frame was altered. */
export async function decryptFrame(k: SFrameKey, frame: Uint8Array, clear: number, h: SFrameHeader): Promise<Uint8Array> {
  const n = clear;
  const aadEnd = n + h.length;
  const plain = new Uint8Array(
    await crypto.subtle.decrypt(
      { name: 'AES-GCM', iv: buf(nonce(k.salt, h.ctr)), additionalData: buf(frame.subarray(0, aadEnd)), tagLength: TAG_BYTES * 8 },
      k.key,
      buf(frame.subarray(aadEnd)),
    ),
  );
  const out = new Uint8Array(n + plain.length);
  out.set(frame.subarray(0, n));
  out.set(plain, n);
  return out;
}

/** Bytes left in the clear: VP8's frame tag (+ keyframe start code and size), Opus's TOC byte. */
export function clearBytes(kind: 'audio' | 'video', keyframe: boolean): number {
  if (kind === 'audio') return 1;
  return keyframe ? 10 : 3;
}
