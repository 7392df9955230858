package lean

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/pion/dtls/v3"
	"github.com/pion/srtp/v3"
)

// GCM is one direction of an AES-GCM SRTP session (RFC 7714) on
// crypto/cipher, keyed from the master key and salt DTLS exported. The lean
// paths seal (session/srtpgcm.go) and open (loadtest/srtpgcm.go) RTP with it in
// place: pion/srtp's EncryptRTP and DecryptRTP also unmarshal the header,
// look the SSRC up in a map and keep their counters behind locks, which cost
// about as much as the cipher itself. One goroutine at a time uses a GCM.
type GCM struct {
	AEAD cipher.AEAD
	salt [12]byte // the session salt
	iv   [12]byte // here, not on the stack: it would escape through the interface
}

// NewGCM derives the session key and salt (RFC 3711 4.3.1, the AES-CM PRF
// that RFC 7714 keeps) for an AES-GCM profile; nil for the other profiles.
func NewGCM(prof srtp.ProtectionProfile, masterKey, masterSalt []byte) (*GCM, error) {
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
	g := &GCM{AEAD: aead}
	copy(g.salt[:], salt)
	return g, nil
}

// GCMFromDTLS is the sending (send) or receiving session of a finished
// handshake, in which this endpoint was the client or not; nil for AES-CM.
func GCMFromDTLS(dc *dtls.Conn, client, send bool) (*GCM, error) {
	prof, ok := dc.SelectedSRTPProtectionProfile()
	if !ok {
		return nil, nil
	}
	state, ok := dc.ConnectionState()
	if !ok {
		return nil, nil
	}
	cfg := srtp.Config{Profile: srtp.ProtectionProfile(prof)}
	if err := cfg.ExtractSessionKeysFromDTLS(&state, client); err != nil {
		return nil, fmt.Errorf("srtp keys: %w", err)
	}
	if send {
		return NewGCM(cfg.Profile, cfg.Keys.LocalMasterKey, cfg.Keys.LocalMasterSalt)
	}
	return NewGCM(cfg.Profile, cfg.Keys.RemoteMasterKey, cfg.Keys.RemoteMasterSalt)
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

// IV is the packet's initialization vector (RFC 7714 8.1), valid until the
// next call.
func (g *GCM) IV(ssrc, roc uint32, seq uint16) []byte {
	iv := &g.iv
	*iv = [12]byte{}
	binary.BigEndian.PutUint32(iv[2:], ssrc)
	binary.BigEndian.PutUint32(iv[6:], roc)
	binary.BigEndian.PutUint16(iv[10:], seq)
	for i := range iv {
		iv[i] ^= g.salt[i]
	}
	return iv[:]
}

// GuessROC is the rollover counter a packet with sequence number seq was
// sent with, given the stream's highest sequence number so far (last, sent
// or received with roc): RFC 3711 3.3.1.
func GuessROC(roc uint32, last, seq uint16) uint32 {
	switch {
	case last < 0x8000 && int32(seq)-int32(last) > 0x8000 && roc > 0:
		return roc - 1
	case last >= 0x8000 && int32(last)-0x8000 > int32(seq):
		return roc + 1
	}
	return roc
}
