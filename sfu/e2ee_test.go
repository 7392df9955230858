package sfu

import (
	"bytes"
	"crypto/rand"
	"testing"

	"github.com/pion/rtp/codecs"
)

// End-to-end encrypted VP8 (docs/e2ee.md): the browser leaves the frame tag
// (and a keyframe's start code and size) in the clear and seals the rest as
// SFrame. The server must find keyframes from the clear bytes alone and rewrite
// only the payload descriptor, leaving every frame byte as the sender sealed it.
func TestE2EEFramesKeepWhatTheServerReads(t *testing.T) {
	sealed := func(clear []byte) []byte {
		body := make([]byte, 2500) // header, ciphertext and tag: random to the server
		_, _ = rand.Read(body)
		return append(append([]byte(nil), clear...), body...)
	}
	// VP8 keyframe: tag with P=0, start code 9d 01 2a, 640x360; delta frame: tag with P=1.
	key := sealed([]byte{0x50, 0x42, 0x00, 0x9d, 0x01, 0x2a, 0x80, 0x02, 0x68, 0x01})
	delta := sealed([]byte{0x31, 0x0a, 0x00})
	for _, tc := range []struct {
		name  string
		frame []byte
		want  bool
	}{{"keyframe", key, true}, {"delta frame", delta, false}} {
		pl := &codecs.VP8Payloader{EnablePictureID: true}
		packets := pl.Payload(1200, tc.frame)
		if got := isKeyframe(codecVP8, packets[0]); got != tc.want {
			t.Errorf("%s: first packet keyframe %v, want %v", tc.name, got, tc.want)
		}
		var frame []byte
		for i, p := range packets {
			if i > 0 && isKeyframe(codecVP8, p) {
				t.Errorf("%s: continuation packet %d taken for a keyframe", tc.name, i)
			}
			d := parseVP8(p)
			if d.picOff == 0 {
				t.Fatalf("%s: no picture id in % x", tc.name, p[:4])
			}
			buf := append([]byte(nil), p...)
			d.rewrite(buf, 1234, 7)
			if got := parseVP8(buf); got.picID != (d.picID+1234)&0x7fff {
				t.Errorf("%s: picture id %d after rewrite, want %d", tc.name, got.picID, (d.picID+1234)&0x7fff)
			}
			frame = append(frame, buf[4:]...) // descriptor: 1 byte, X byte, 15-bit picture id
		}
		if !bytes.Equal(frame, tc.frame) {
			t.Errorf("%s: the forwarded frame differs from the sealed one", tc.name)
		}
	}
}
