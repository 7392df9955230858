package loadtest

import (
	"encoding/binary"
	"errors"

	"github.com/pion/srtp/v3"

	"github.com/petrel-sfu/petrel/rtc/lean"
)

// gcmRx is a lean peer's SRTP receiver for the AES-GCM profiles (RFC 7714),
// built on crypto/cipher from the master key and salt DTLS exported, so that
// the per-packet work is one AEAD open in place and a few comparisons:
// pion/srtp's DecryptRTP also unmarshals the header into an rtp.Header,
// looks the SSRC's state up in a map and checks the replay window through
// an interface, which cost about as much as the decryption itself in the
// generator's profile. Replay protection is kept: a 64-packet window per
// SSRC, as srtp.SRTPReplayProtection(64). One goroutine (the peer's reader)
// uses it.
type gcmRx struct {
	// n and the first two streams share the first cache line (the lookup
	// of every packet; see leanPeer).
	n     int
	ssrcs [8]gcmSSRC
	lean.GCM
	_ [16]byte // 256 bytes: an allocation that starts a cache line
}

// gcmSSRC is one stream's rollover counter and replay window.
type gcmSSRC struct {
	window  uint64 // bit i: index (highest − i) was received
	ssrc    uint32
	roc     uint32
	maxSeq  uint16 // the highest authenticated sequence number
	started bool
}

var errSRTPAuth = errors.New("srtp: authentication failed")
var errSRTPReplay = errors.New("srtp: replayed or too old")

// newGCMRx is the opener for an AES-GCM profile; nil for other profiles.
func newGCMRx(prof srtp.ProtectionProfile, masterKey, masterSalt []byte) (*gcmRx, error) {
	k, err := lean.NewGCM(prof, masterKey, masterSalt)
	if k == nil || err != nil {
		return nil, err
	}
	return &gcmRx{GCM: *k}, nil
}

// open authenticates and decrypts the SRTP packet b in place and returns
// the RTP packet (b without the tag). b must be at least an RTP header.
func (g *gcmRx) open(b []byte) ([]byte, error) {
	n := len(b)
	if n < 12+16 || b[0]>>6 != 2 {
		return nil, errSRTPAuth
	}
	hl := 12 + 4*int(b[0]&0x0f)
	if b[0]&0x10 != 0 {
		if n < hl+4 {
			return nil, errSRTPAuth
		}
		hl += 4 + 4*int(binary.BigEndian.Uint16(b[hl+2:]))
	}
	if n < hl+16 {
		return nil, errSRTPAuth
	}
	seq := binary.BigEndian.Uint16(b[2:])
	ssrc := binary.BigEndian.Uint32(b[8:])
	s := g.state(ssrc)
	if s == nil {
		return nil, errSRTPAuth // more streams than a viewer gets
	}
	// The rollover counter this packet was sent with (RFC 3711 3.3.1) and
	// its place against the replay window.
	roc := s.roc
	var delta int64 // index − highest index
	if s.started {
		roc = lean.GuessROC(s.roc, s.maxSeq, seq)
		delta = (int64(roc)<<16 | int64(seq)) - (int64(s.roc)<<16 | int64(s.maxSeq))
		if delta <= 0 && (-delta >= 64 || s.window&(1<<uint(-delta)) != 0) {
			return nil, errSRTPReplay
		}
	}
	if _, err := g.AEAD.Open(b[hl:hl], g.IV(ssrc, roc, seq), b[hl:], b[:hl]); err != nil {
		return nil, errSRTPAuth
	}
	switch {
	case !s.started:
		s.started, s.roc, s.maxSeq, s.window = true, roc, seq, 1
	case delta > 0:
		if delta < 64 {
			s.window = s.window<<uint(delta) | 1
		} else {
			s.window = 1
		}
		s.roc, s.maxSeq = roc, seq
	default:
		s.window |= 1 << uint(-delta)
	}
	return b[:n-16], nil
}

func (g *gcmRx) state(ssrc uint32) *gcmSSRC {
	for i := 0; i < g.n; i++ {
		if g.ssrcs[i].ssrc == ssrc {
			return &g.ssrcs[i]
		}
	}
	if g.n == len(g.ssrcs) {
		return nil
	}
	g.ssrcs[g.n] = gcmSSRC{ssrc: ssrc}
	g.n++
	return &g.ssrcs[g.n-1]
}
