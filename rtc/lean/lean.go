// Package lean holds the building blocks of a WebRTC endpoint built without a
// Pion PeerConnection: a DTLS certificate and its fingerprint, ICE binding
// requests answered by hand with pion/stun (short-term credentials), the
// net.PacketConn a pion/dtls handshake runs over when one goroutine owns the
// socket, and the SRTP contexts derived from the handshake.
//
// Two endpoints use them in opposite roles: the load generator's lean viewer
// (loadtest/leanpeer.go: ICE controlling, DTLS client) and the server's lean
// session server (session/: ICE-lite controlled, DTLS server).
package lean

import (
	"crypto/rand"
	"crypto/sha1" //nolint:gosec // RFC 4572 names sha-1 fingerprints; only compared
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"strings"

	"github.com/pion/dtls/v3"
	"github.com/pion/dtls/v3/pkg/crypto/selfsign"
	"github.com/pion/srtp/v3"
)

// Cert is a DTLS certificate and its SHA-256 fingerprint as SDP writes it.
// One per process is enough: a handshake signs with it, nothing else depends
// on it, and sharing it saves a key generation per connection.
type Cert struct {
	TLS         tls.Certificate
	Fingerprint string // colon-separated upper-case hex
}

// NewCert makes a self-signed ECDSA certificate.
func NewCert() (*Cert, error) {
	c, err := selfsign.GenerateSelfSigned()
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(c.Certificate[0])
	return &Cert{TLS: c, Fingerprint: ColonHex(sum[:])}, nil
}

// ColonHex writes b as SDP fingerprints do: "AB:CD:…".
func ColonHex(b []byte) string {
	h := strings.ToUpper(hex.EncodeToString(b))
	var sb strings.Builder
	for i := 0; i < len(h); i += 2 {
		if i > 0 {
			sb.WriteByte(':')
		}
		sb.WriteString(h[i : i+2])
	}
	return sb.String()
}

// ParseFingerprint reads the value of an a=fingerprint attribute.
func ParseFingerprint(v string) (alg string, fp []byte, err error) {
	alg, hexs, ok := strings.Cut(strings.TrimSpace(v), " ")
	if !ok {
		return "", nil, fmt.Errorf("bad fingerprint %q", v)
	}
	fp, err = hex.DecodeString(strings.ReplaceAll(strings.TrimSpace(hexs), ":", ""))
	if err != nil || len(fp) < 20 {
		return "", nil, fmt.Errorf("bad fingerprint %q", v)
	}
	// A copy: ToLower of a lower-case name is a substring, and a session
	// keeps alg (it would keep the whole parsed description alive).
	return strings.Clone(strings.ToLower(alg)), fp, nil
}

// VerifyFingerprint is the DTLS check that the peer's certificate is the one
// its SDP named (the certificate itself is self-signed).
func VerifyFingerprint(alg string, want []byte, raw [][]byte) error {
	if len(raw) == 0 {
		return errors.New("dtls: the peer sent no certificate")
	}
	var h hash.Hash
	switch alg {
	case "sha-256":
		h = sha256.New()
	case "sha-384":
		h = sha512.New384()
	case "sha-512":
		h = sha512.New()
	case "sha-1":
		h = sha1.New() //nolint:gosec
	default:
		return fmt.Errorf("dtls: unsupported fingerprint algorithm %q", alg)
	}
	h.Write(raw[0])
	got := h.Sum(nil)
	if subtle.ConstantTimeCompare(got, want) != 1 {
		return fmt.Errorf("dtls: fingerprint mismatch: the SDP says %s %s, the peer's certificate is %s", alg, ColonHex(want), ColonHex(got))
	}
	return nil
}

// SRTPProfiles are the protection profiles offered in the DTLS handshake,
// best first: AES-GCM costs a sixth of AES-CM with HMAC-SHA1 per packet
// (docs/benchmarks.md, the floor).
var SRTPProfiles = []dtls.SRTPProtectionProfile{dtls.SRTP_AEAD_AES_256_GCM, dtls.SRTP_AEAD_AES_128_GCM, dtls.SRTP_AES128_CM_HMAC_SHA1_80}

// SRTPContexts derives the receiving and sending SRTP contexts from a
// finished handshake. client says which side of it this endpoint was.
func SRTPContexts(dc *dtls.Conn, client bool) (rx, tx *srtp.Context, err error) {
	cfg, err := srtpKeys(dc, client)
	if err != nil {
		return nil, nil, err
	}
	rx, err = srtp.CreateContext(cfg.Keys.RemoteMasterKey, cfg.Keys.RemoteMasterSalt, cfg.Profile, srtp.SRTPReplayProtection(64), srtp.SRTCPReplayProtection(64))
	if err != nil {
		return nil, nil, fmt.Errorf("srtp: %w", err)
	}
	tx, err = srtp.CreateContext(cfg.Keys.LocalMasterKey, cfg.Keys.LocalMasterSalt, cfg.Profile)
	if err != nil {
		return nil, nil, fmt.Errorf("srtp: %w", err)
	}
	return rx, tx, nil
}

// SRTPReceiver is a second receiving context from a finished handshake,
// for a goroutine other than the first's (a context is one goroutine's),
// with a replay window of window packets: a publisher that retransmits on
// the media SSRC repeats packets far behind the newest.
func SRTPReceiver(dc *dtls.Conn, client bool, window uint) (*srtp.Context, error) {
	cfg, err := srtpKeys(dc, client)
	if err != nil {
		return nil, err
	}
	rx, err := srtp.CreateContext(cfg.Keys.RemoteMasterKey, cfg.Keys.RemoteMasterSalt, cfg.Profile, srtp.SRTPReplayProtection(window))
	if err != nil {
		return nil, fmt.Errorf("srtp: %w", err)
	}
	return rx, nil
}

// srtpKeys are the SRTP keys and profile a finished handshake exported.
func srtpKeys(dc *dtls.Conn, client bool) (*srtp.Config, error) {
	prof, ok := dc.SelectedSRTPProtectionProfile()
	if !ok {
		return nil, errors.New("dtls: no SRTP protection profile was negotiated")
	}
	state, ok := dc.ConnectionState()
	if !ok {
		return nil, errors.New("dtls: no connection state after the handshake")
	}
	cfg := &srtp.Config{Profile: srtp.ProtectionProfile(prof)}
	if err := cfg.ExtractSessionKeysFromDTLS(&state, client); err != nil {
		return nil, fmt.Errorf("srtp keys: %w", err)
	}
	return cfg, nil
}

// Token is n random characters from the ICE alphabet (ufrag, pwd).
func Token(n int) string {
	const alpha = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	b := make([]byte, n)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alpha[int(b[i])%len(alpha)]
	}
	return string(b)
}
