package loadtest

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"errors"

	"github.com/pion/srtp/v3"
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
	aead  cipher.AEAD
	salt  [12]byte // the session salt
	iv    [12]byte // here, not on the stack: it would escape through the interface
	ssrcs [8]gcmSSRC
	n     int
}

// gcmSSRC is one stream's rollover counter and replay window.
type gcmSSRC struct {
	ssrc    uint32
	started bool
	roc     uint32
	maxSeq  uint16 // the highest authenticated sequence number
	window  uint64 // bit i: index (highest − i) was received
}

var errSRTPAuth = errors.New("srtp: authentication failed")
var errSRTPReplay = errors.New("srtp: replayed or too old")

// newGCMRx derives the session key and salt (RFC 3711 4.3.1, the AES-CM
// PRF that RFC 7714 keeps) for an AES-GCM profile; nil for other profiles.
func newGCMRx(prof srtp.ProtectionProfile, masterKey, masterSalt []byte) (*gcmRx, error) {
	if prof != srtp.ProtectionProfileAeadAes128Gcm && prof != srtp.ProtectionProfileAeadAes256Gcm {
		return nil, nil
	}
	if len(masterSalt) != 12 {
		return nil, errors.New("srtp: AES-GCM needs a 12-byte master salt")
	}
	key, err := srtpKDF(0x00, masterKey, masterSalt, len(masterKey))
	if err != nil {
		return nil, err
	}
	salt, err := srtpKDF(0x02, masterKey, masterSalt, 12)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	g := &gcmRx{aead: aead}
	copy(g.salt[:], salt)
	return g, nil
}

// srtpKDF is the SRTP key derivation with a key derivation rate of 0.
func srtpKDF(label byte, masterKey, masterSalt []byte, n int) ([]byte, error) {
	block, err := aes.NewCipher(masterKey)
	if err != nil {
		return nil, err
	}
	var in [16]byte
	copy(in[:], masterSalt)
	in[7] ^= label
	out := make([]byte, (n+15)/16*16)
	for i := 0; i*16 < n; i++ {
		binary.BigEndian.PutUint16(in[14:], uint16(i))
		block.Encrypt(out[i*16:], in[:])
	}
	return out[:n], nil
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
		switch {
		case s.maxSeq < 0x8000 && int32(seq)-int32(s.maxSeq) > 0x8000 && s.roc > 0:
			roc--
		case s.maxSeq >= 0x8000 && int32(s.maxSeq)-0x8000 > int32(seq):
			roc++
		}
		delta = (int64(roc)<<16 | int64(seq)) - (int64(s.roc)<<16 | int64(s.maxSeq))
		if delta <= 0 && (-delta >= 64 || s.window&(1<<uint(-delta)) != 0) {
			return nil, errSRTPReplay
		}
	}
	iv := &g.iv
	*iv = [12]byte{}
	binary.BigEndian.PutUint32(iv[2:], ssrc)
	binary.BigEndian.PutUint32(iv[6:], roc)
	binary.BigEndian.PutUint16(iv[10:], seq)
	for i := range iv {
		iv[i] ^= g.salt[i]
	}
	if _, err := g.aead.Open(b[hl:hl], iv[:], b[hl:], b[:hl]); err != nil {
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
