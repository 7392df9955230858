// Trickled candidates from the network (web/sdk/direct.ts): what a viewer
// adds and what it refuses with an error to the camera.
import assert from 'node:assert/strict';
import test from 'node:test';
import { badCandidate } from '../sdk/direct.js';

test('well-formed candidates pass, hostile ones are refused with a reason', () => {
  assert.equal(badCandidate({ candidate: 'candidate:1 1 udp 2130706431 127.0.0.1 50000 typ host', sdpMid: '0', sdpMLineIndex: 0 }), undefined);
  assert.equal(badCandidate({ candidate: '', sdpMid: '0' }), undefined); // end of a generation
  assert.match(badCandidate(null) ?? '', /no candidate/);
  assert.match(badCandidate({ candidate: 42 }) ?? '', /not a string/);
  assert.match(badCandidate({ candidate: 'hello' }) ?? '', /not an ICE candidate/);
  assert.match(badCandidate({ candidate: 'candidate:1 1 udp 1 127.0.0.1 9 typ host\r\na=evil' }) ?? '', /line break/);
  assert.match(badCandidate({ candidate: 'candidate:' + 'x'.repeat(600) }) ?? '', /bytes/);
  assert.match(badCandidate({ candidate: 'candidate:1', sdpMid: 'm'.repeat(40) }) ?? '', /sdpMid/);
  assert.match(badCandidate({ candidate: 'candidate:1', sdpMLineIndex: 99 }) ?? '', /sdpMLineIndex/);
});
