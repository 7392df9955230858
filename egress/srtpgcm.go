package egress

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/pion/dtls/v3"
	"github.com/pion/srtp/v3"
)

// gcmTx protects a viewer's RTP for the AES-GCM profiles (RFC 7714) on
// crypto/cipher, keyed from the master key DTLS exported: the packet is
// built in the output buffer and sealed in place. pion/srtp's EncryptRTP
// costs twice its AES-GCM seal (a per-SSRC map lookup, the header marshalled
// again, rollover bookkeeping behind locks) and needs the plaintext in a
// second buffer; RTCP still goes through pion/srtp. Used under the viewer's
// write lock.
type gcmTx struct {
	aead  cipher.AEAD
	salt  [12]byte
	iv    [12]byte // not on the stack: it would escape through the interface
	ssrcs [4]gcmTxSSRC
	n     int
}

// gcmTxSSRC is one stream's rollover counter: the highest sequence number
// sent and the ROC it was sent with.
type gcmTxSSRC struct {
	ssrc    uint32
	started bool
	roc     uint32
	last    uint16
}

const gcmTag = 16

// newGCMTx returns the sealer for an AES-GCM profile, nil for the others.
func newGCMTx(prof srtp.ProtectionProfile, masterKey, masterSalt []byte) (*gcmTx, error) {
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
	g := &gcmTx{aead: aead}
	copy(g.salt[:], salt)
	return g, nil
}

// srtpKDF is the SRTP key derivation (RFC 3711 4.3.1, key derivation rate 0).
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

// seal protects the RTP packet buf[:n] whose header is hl bytes, in place:
// buf must have room for the 16-byte tag. It returns the SRTP packet.
func (g *gcmTx) seal(buf []byte, n, hl int) []byte {
	seq := binary.BigEndian.Uint16(buf[2:])
	ssrc := binary.BigEndian.Uint32(buf[8:])
	s := g.state(ssrc)
	roc := s.roc
	if !s.started {
		s.started, s.last = true, seq
	} else {
		// The ROC a receiver will guess for seq (RFC 3711 3.3.1): a
		// retransmission from before a wrap keeps the previous one.
		switch {
		case s.last < 0x8000 && int32(seq)-int32(s.last) > 0x8000 && s.roc > 0:
			roc--
		case s.last >= 0x8000 && int32(s.last)-0x8000 > int32(seq):
			roc++
		}
		if uint64(roc)<<16|uint64(seq) > uint64(s.roc)<<16|uint64(s.last) {
			s.roc, s.last = roc, seq
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
	return buf[:hl+len(g.aead.Seal(buf[hl:hl], iv[:], buf[hl:n], buf[:hl]))]
}

func (g *gcmTx) state(ssrc uint32) *gcmTxSSRC {
	for i := 0; i < g.n; i++ {
		if g.ssrcs[i].ssrc == ssrc {
			return &g.ssrcs[i]
		}
	}
	if g.n < len(g.ssrcs) {
		g.n++
	} else {
		copy(g.ssrcs[:], g.ssrcs[1:]) // a viewer has two streams; keep the newest
	}
	g.ssrcs[g.n-1] = gcmTxSSRC{ssrc: ssrc}
	return &g.ssrcs[g.n-1]
}

// viewerGCM is the sealer for a finished server handshake (nil for AES-CM).
func viewerGCM(dc *dtls.Conn) (*gcmTx, error) {
	prof, ok := dc.SelectedSRTPProtectionProfile()
	if !ok {
		return nil, nil
	}
	state, ok := dc.ConnectionState()
	if !ok {
		return nil, nil
	}
	cfg := srtp.Config{Profile: srtp.ProtectionProfile(prof)}
	if err := cfg.ExtractSessionKeysFromDTLS(&state, false); err != nil {
		return nil, fmt.Errorf("srtp keys: %w", err)
	}
	return newGCMTx(cfg.Profile, cfg.Keys.LocalMasterKey, cfg.Keys.LocalMasterSalt)
}
