package session

import (
	"bytes"
	"crypto/rand"
	"testing"

	"github.com/pion/rtp"
	"github.com/pion/srtp/v3"
)

// TestGCMTx seals with the viewer's AES-GCM sealer and opens with pion/srtp
// (what a browser's libsrtp does alike), for both GCM profiles: across a
// sequence number rollover, with a retransmission from before the wrap,
// with a header extension and padding, and for two streams.
func TestGCMTx(t *testing.T) {
	for _, prof := range []srtp.ProtectionProfile{srtp.ProtectionProfileAeadAes128Gcm, srtp.ProtectionProfileAeadAes256Gcm} {
		kl, _ := prof.KeyLen()
		sl, _ := prof.SaltLen()
		key, salt := make([]byte, kl), make([]byte, sl)
		_, _ = rand.Read(key)
		_, _ = rand.Read(salt)
		g, err := newGCMTx(prof, key, salt)
		if err != nil || g == nil {
			t.Fatal(err)
		}
		dec, err := srtp.CreateContext(key, salt, prof)
		if err != nil {
			t.Fatal(err)
		}
		payload := bytes.Repeat([]byte{0x33}, 1000)
		buf := make([]byte, mtu+srtpOverhead)
		send := func(seq uint16, ssrc uint32, pad bool) {
			t.Helper()
			h := rtp.Header{Version: 2, PayloadType: 96, SequenceNumber: seq, Timestamp: 9, SSRC: ssrc}
			_ = h.SetExtension(5, []byte{1, 2, 3})
			hl, err := h.MarshalTo(buf)
			if err != nil {
				t.Fatal(err)
			}
			n := hl + copy(buf[hl:], payload)
			if pad {
				buf[0] |= 0x20
				buf[n], buf[n+1], buf[n+2], buf[n+3] = 0, 0, 0, 4
				n += 4
			}
			want := append([]byte(nil), buf[:n]...)
			out := g.seal(buf, n, hl)
			got, err := dec.DecryptRTP(nil, out, nil)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%v seq %d ssrc %x: %v", prof, seq, ssrc, err)
			}
		}
		for i := 0; i < 300; i++ {
			send(uint16(65300+i), 0xdeadbeef, i%50 == 0)
			if i%7 == 0 {
				send(uint16(i), 0x01020304, false)
			}
		}
		send(65500, 0xdeadbeef, false) // a retransmission from before the wrap
		send(uint16(65300+300-65536), 0xdeadbeef, false)
	}
	if g, err := newGCMTx(srtp.ProtectionProfileAes128CmHmacSha1_80, make([]byte, 16), make([]byte, 14)); g != nil || err != nil {
		t.Fatal("AES-CM is left to pion/srtp")
	}
}

// TestGCMTxManyStreams: a room subscriber gets a stream per track. Every
// stream keeps its rollover counter while the others are sent in between,
// however many there are: with room for four, a sixth evicted the first, which
// started again from ROC 0, and once its sequence numbers had wrapped the
// receiver could not open it (every subscriber lost that publisher's video).
func TestGCMTxManyStreams(t *testing.T) {
	prof := srtp.ProtectionProfileAeadAes128Gcm
	key, salt := make([]byte, 16), make([]byte, 12)
	_, _ = rand.Read(key)
	_, _ = rand.Read(salt)
	g, err := newGCMTx(prof, key, salt)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := srtp.CreateContext(key, salt, prof)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, mtu+srtpOverhead)
	for i := 0; i < 400; i++ {
		for s := uint32(1); s <= 6; s++ {
			h := rtp.Header{Version: 2, PayloadType: 96, SequenceNumber: uint16(65300 + i + int(s)*10), SSRC: s}
			hl, _ := h.MarshalTo(buf)
			n := hl + copy(buf[hl:], []byte("payload"))
			if _, err := dec.DecryptRTP(nil, g.seal(buf, n, hl), nil); err != nil {
				t.Fatalf("packet %d of stream %d (seq %d): %v", i, s, h.SequenceNumber, err)
			}
		}
	}
}

// TestGCMTxKeepsLiveStream: streams that come and go (a room's tracks, one
// SSRC each) never push out the counter of a stream still being sent: when
// the oldest stream was dropped first, a subscriber's first track lost its
// rollover counter after a thousand others had come and gone, and once its
// sequence numbers had wrapped the receiver could not open it.
func TestGCMTxKeepsLiveStream(t *testing.T) {
	prof := srtp.ProtectionProfileAeadAes128Gcm
	key, salt := make([]byte, 16), make([]byte, 12)
	_, _ = rand.Read(key)
	_, _ = rand.Read(salt)
	g, err := newGCMTx(prof, key, salt)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := srtp.CreateContext(key, salt, prof)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, mtu+srtpOverhead)
	send := func(ssrc uint32, seq uint16) error {
		h := rtp.Header{Version: 2, PayloadType: 96, SequenceNumber: seq, SSRC: ssrc}
		hl, _ := h.MarshalTo(buf)
		n := hl + copy(buf[hl:], []byte("payload"))
		_, err := dec.DecryptRTP(nil, g.seal(buf, n, hl), nil)
		return err
	}
	for i := 0; i < 3*maxTxSSRCs; i++ {
		if err := send(1, uint16(65000+i)); err != nil {
			t.Fatalf("packet %d of the live stream: %v", i, err)
		}
		if err := send(uint32(1000+i), 1); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			g.forget(uint32(1000 + i)) // its track went
		}
	}
}
