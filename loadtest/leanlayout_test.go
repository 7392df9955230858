package loadtest

import (
	"testing"
	"unsafe"
)

// TestLeanPeerLayout keeps what a lean viewer reads for every packet in the
// first cache lines of its state (see leanPeer): the remote, the AES-GCM
// opener and the stream count in the first 64 bytes, the audio and video
// streams in the next 64, and the opener's count and first two SSRC states
// in its own first line. A field added in between would cost a cache miss
// per packet at a thousand viewers. Go places an object at a multiple of
// its size class; the classes these sizes fall in are multiples of 64
// bytes, so each object starts a cache line.
func TestLeanPeerLayout(t *testing.T) {
	var l leanPeer
	for name, end := range map[string]uintptr{
		"remote":   unsafe.Offsetof(l.remote) + unsafe.Sizeof(l.remote),
		"grx":      unsafe.Offsetof(l.grx) + unsafe.Sizeof(l.grx),
		"nstreams": unsafe.Offsetof(l.nstreams) + unsafe.Sizeof(l.nstreams),
		"pkts":     unsafe.Offsetof(l.pkts) + unsafe.Sizeof(l.pkts),
	} {
		if end > 64 {
			t.Errorf("leanPeer.%s ends at byte %d, past the first cache line", name, end)
		}
	}
	if off, sz := unsafe.Offsetof(l.streams), unsafe.Sizeof(l.streams[0]); off != 64 || 2*sz > 64 {
		t.Errorf("leanPeer.streams at %d with %d-byte streams: streams 0 and 1 should fill the second cache line", off, sz)
	}
	var g gcmRx
	if end := unsafe.Offsetof(g.ssrcs) + 2*unsafe.Sizeof(g.ssrcs[0]); end > 64 {
		t.Errorf("gcmRx: n and the first two SSRC states end at byte %d, past one cache line", end)
	}
	var st streamRx
	if end := unsafe.Offsetof(st.delayMax) + unsafe.Sizeof(st.delayMax); end > 128 {
		t.Errorf("streamRx: the per-packet fields end at byte %d, past two cache lines", end)
	}
	// (A leanPeer, 872 bytes, takes the 896-byte class.)
	for name, sz := range map[string]uintptr{"gcmRx": unsafe.Sizeof(g), "streamRx": unsafe.Sizeof(st)} {
		if sz%64 != 0 {
			t.Errorf("%s is %d bytes, not a multiple of 64: pad it", name, sz)
		}
	}
}
