// SFrame (sdk/sframe.ts): the header layout of RFC 9605 §4.3, key derivation and
// the frame AEAD with its clear prefix, in Node's WebCrypto.
import assert from 'node:assert/strict';
import test from 'node:test';
import { decryptFrame, deriveKey, encodeHeader, encryptFrame, frameHeader, parseHeader, passphraseSecret, ratchetSecret, senderSecret } from '../sdk/sframe.js';

const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');

test('SFrame headers: small values inline, larger ones in the fewest bytes', () => {
  const cases: [number, number, string][] = [
    [0, 0, '00'],
    [7, 7, '77'],
    [0, 8, '0808'],
    [8, 0, '8008'],
    [0xff, 0xaa, '88ffaa'],
    [0x1ff, 0xaaaa, '9901ffaaaa'],
    [3, 2 ** 52 - 1, '3e0fffffffffffff'],
  ];
  for (const [kid, ctr, want] of cases) {
    const h = encodeHeader(kid, ctr);
    assert.equal(hex(h), want, `kid ${kid} ctr ${ctr}`);
    assert.deepEqual(parseHeader(h), { kid, ctr, length: h.length });
  }
  assert.equal(parseHeader(Uint8Array.of(0x88, 0xff)), null, 'counter bytes missing');
  assert.equal(parseHeader(Uint8Array.of(0xf0, 1, 2, 3, 4, 5, 6, 7, 8)), null, 'an 8-byte key id does not fit');
  assert.equal(parseHeader(new Uint8Array(0)), null);
});

test('frames round-trip with the clear prefix authenticated, and only under the right key', async () => {
  const base = await passphraseSecret('correct horse');
  const alice = await deriveKey(await senderSecret(base, 'alice'), 0);
  const frame = Uint8Array.from({ length: 200 }, (_, i) => (i * 7) & 0xff);
  const sealed = await encryptFrame(alice, 1000, frame, 10);
  assert.deepEqual([...sealed.subarray(0, 10)], [...frame.subarray(0, 10)], 'the first 10 bytes stay readable');
  assert.notDeepEqual([...sealed.subarray(13, 60)], [...frame.subarray(10, 57)], 'the rest is not');
  const h = frameHeader(sealed, 10);
  assert.deepEqual(h, { kid: 0, ctr: 1000, length: 3 });
  assert.deepEqual([...(await decryptFrame(alice, sealed, 10, h!))], [...frame]);

  // Another sender's key, another passphrase, a touched clear byte: all refused.
  const bob = await deriveKey(await senderSecret(base, 'bob'), 0);
  await assert.rejects(decryptFrame(bob, sealed, 10, h!));
  const other = await deriveKey(await senderSecret(await passphraseSecret('wrong'), 'alice'), 0);
  await assert.rejects(decryptFrame(other, sealed, 10, h!));
  const touched = sealed.slice();
  touched[5] ^= 1;
  await assert.rejects(decryptFrame(alice, touched, 10, h!));
  // A frame no longer than its prefix has nothing sealed but is still authenticated.
  const bare = await encryptFrame(alice, 1, Uint8Array.of(0xfc), 1);
  assert.equal(bare.length, 1 + 1 + 16); // TOC, header 0x01, tag
  assert.deepEqual([...(await decryptFrame(alice, bare, 1, frameHeader(bare, 1)!))], [0xfc]);
  await assert.rejects(encryptFrame(alice, 2, Uint8Array.of(1, 2), 10), /shorter than its clear prefix/);
  assert.equal(frameHeader(Uint8Array.of(1, 2, 3), 10), null);
});

test('a ratchet step gives a new key; the old key opens none of its frames', async () => {
  const s0 = await senderSecret(await passphraseSecret('p'), 'alice');
  const s1 = await ratchetSecret(s0);
  assert.notEqual(hex(s0), hex(s1));
  assert.equal(hex(await ratchetSecret(s0)), hex(s1), 'deterministic: receivers follow by themselves');
  const k1 = await deriveKey(s1, 1);
  const sealed = await encryptFrame(k1, 0, new Uint8Array(50), 1);
  const h = frameHeader(sealed, 1)!;
  assert.equal(h.kid, 1);
  await assert.rejects(decryptFrame(await deriveKey(s0, 1), sealed, 1, h));
  assert.equal((await decryptFrame(k1, sealed, 1, h)).length, 50);
});
