package loadtest

import (
	"bytes"
	"crypto/rand"
	"testing"

	"github.com/pion/rtp"
	"github.com/pion/srtp/v3"
)

// TestGCMRx checks the generator's AES-GCM SRTP receiver against pion/srtp's
// sender for both GCM profiles: packets decrypt to what was sent, across a
// sequence number rollover and out of order within the window; replays,
// packets older than the window, forged tags and other keys are refused.
func TestGCMRx(t *testing.T) {
	for _, prof := range []srtp.ProtectionProfile{srtp.ProtectionProfileAeadAes128Gcm, srtp.ProtectionProfileAeadAes256Gcm} {
		kl, _ := prof.KeyLen()
		sl, _ := prof.SaltLen()
		key, salt := make([]byte, kl), make([]byte, sl)
		_, _ = rand.Read(key)
		_, _ = rand.Read(salt)
		enc, err := srtp.CreateContext(key, salt, prof)
		if err != nil {
			t.Fatal(err)
		}
		g, err := newGCMRx(prof, key, salt)
		if err != nil || g == nil {
			t.Fatal(err)
		}
		payload := bytes.Repeat([]byte{0x42}, 900)
		seal := func(seq uint16, ssrc uint32) ([]byte, []byte) {
			h := rtp.Header{Version: 2, PayloadType: 96, SequenceNumber: seq, Timestamp: uint32(seq) * 3000, SSRC: ssrc,
				CSRC: []uint32{7}}
			_ = h.SetExtension(3, []byte{1, 2})
			plain, _ := h.Marshal()
			plain = append(plain, payload...)
			out, err := enc.EncryptRTP(nil, plain, &h)
			if err != nil {
				t.Fatal(err)
			}
			return out, plain
		}
		open := func(pkt []byte) ([]byte, error) { return g.open(append([]byte(nil), pkt...)) }
		var saved [][]byte
		// Across the rollover at 65535, with a second SSRC interleaved.
		for i := 0; i < 200; i++ {
			seq := uint16(65400 + i)
			pkt, plain := seal(seq, 0xaabbccdd)
			got, err := open(pkt)
			if err != nil || !bytes.Equal(got, plain) {
				t.Fatalf("%v seq %d: %v", prof, seq, err)
			}
			if i%10 == 0 {
				pkt2, plain2 := seal(uint16(i), 0x11111111)
				if got, err := open(pkt2); err != nil || !bytes.Equal(got, plain2) {
					t.Fatalf("%v second ssrc: %v", prof, err)
				}
			}
			saved = append(saved, pkt)
		}
		// A replay, one too old, and reordering inside the window.
		if _, err := open(saved[len(saved)-1]); err != errSRTPReplay {
			t.Fatalf("%v replay: %v", prof, err)
		}
		if _, err := open(saved[len(saved)-100]); err != errSRTPReplay {
			t.Fatalf("%v too old: %v", prof, err)
		}
		late, _ := seal(uint16(65400+200+5-65536), 0xaabbccdd)
		early, plain := seal(uint16(65400+200+2-65536), 0xaabbccdd)
		if _, err := open(late); err != nil {
			t.Fatal(err)
		}
		if got, err := open(early); err != nil || !bytes.Equal(got, plain) {
			t.Fatalf("%v reordered: %v", prof, err)
		}
		// Forged: a flipped bit in the payload or the header.
		for _, at := range []int{len(late) - 20, 5} {
			f, _ := seal(uint16(65400+300-65536), 0xaabbccdd)
			f[at] ^= 1
			if _, err := open(f); err != errSRTPAuth {
				t.Fatalf("%v forged at %d: %v", prof, at, err)
			}
		}
		if _, err := g.open([]byte{0x80, 0x60, 0, 1}); err != errSRTPAuth {
			t.Fatalf("short packet: %v", err)
		}
	}
	if g, err := newGCMRx(srtp.ProtectionProfileAes128CmHmacSha1_80, make([]byte, 16), make([]byte, 14)); g != nil || err != nil {
		t.Fatal("AES-CM is left to pion/srtp")
	}
}
