// WHEP helpers (web/sdk/whep.ts): the trickle-ice-sdpfrag a full-ICE server
// reads (signal/whip.go parseFrag), and the codec check where the browser says nothing.
import assert from 'node:assert/strict';
import test from 'node:test';
import { sdpFrag, receivesOverWebRTC } from '../sdk/whep.js';

test('sdpFrag carries the offer\'s ICE credentials, the mid and each candidate', () => {
  const local = 'v=0\r\na=ice-ufrag:AbCd\r\na=ice-pwd:secretsecretsecretsecret\r\nm=video 9 UDP/TLS/RTP/SAVPF 96\r\na=mid:0\r\n';
  const frag = sdpFrag(local, '0', ['candidate:1 1 udp 2130706431 127.0.0.1 50000 typ host', 'candidate:2 1 udp 1694498815 192.0.2.1 50001 typ srflx raddr 0.0.0.0 rport 0']);
  assert.equal(
    frag,
    'a=ice-ufrag:AbCd\r\na=ice-pwd:secretsecretsecretsecret\r\nm=audio 9 RTP/AVP 0\r\na=mid:0\r\n' +
      'a=candidate:1 1 udp 2130706431 127.0.0.1 50000 typ host\r\na=candidate:2 1 udp 1694498815 192.0.2.1 50001 typ srflx raddr 0.0.0.0 rport 0\r\n',
  );
});

test('without receiver capabilities (no WebRTC here) the server\'s answer decides', () => {
  assert.equal(receivesOverWebRTC('video/H264'), true);
});
