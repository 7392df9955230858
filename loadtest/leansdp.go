package loadtest

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/pion/sdp/v3"

	"github.com/petrel-sfu/petrel/rtc/lean"
)

// leanPT is what the answer says a payload type carries.
type leanPT struct {
	kind  string // "video", "audio"; "" = not in the answer
	clock uint32
}

// leanAnswer is what a lean peer needs from the server's answer.
type leanAnswer struct {
	ufrag, pwd string
	fpAlg      string // "sha-256"
	fp         []byte
	setup      string
	lite       bool // the server is ICE-lite: it answers checks, never sends any
	remote     netip.AddrPort
	pts        [128]leanPT
	ssrcKind   map[uint32]string
}

// leanOffer is a recvonly audio+video offer (BUNDLE, rtcp-mux, one host
// candidate, setup:active so the lean peer is the DTLS client). It offers no
// RTX and no header extensions: retransmissions come on the media SSRC and
// every byte the server adds is a byte the generator decrypts for nothing.
func leanOffer(ufrag, pwd, fpAlg, fp string, local netip.AddrPort) (string, error) {
	id := make([]byte, 8)
	_, _ = rand.Read(id)
	sid := uint64(id[0]&0x7f)<<56 | uint64(id[1])<<48 | uint64(id[2])<<40 | uint64(id[3])<<32 | uint64(id[4])<<24 | uint64(id[5])<<16 | uint64(id[6])<<8 | uint64(id[7])
	s := &sdp.SessionDescription{
		Version:          0,
		Origin:           sdp.Origin{Username: "-", SessionID: sid, SessionVersion: 2, NetworkType: "IN", AddressType: "IP4", UnicastAddress: "0.0.0.0"},
		SessionName:      "-",
		TimeDescriptions: []sdp.TimeDescription{{Timing: sdp.Timing{}}},
	}
	s = s.WithValueAttribute("group", "BUNDLE 0 1").WithPropertyAttribute("extmap-allow-mixed")
	cand := fmt.Sprintf("1 1 udp 2130706431 %s %d typ host", local.Addr(), local.Port())
	media := func(kind, mid string) *sdp.MediaDescription {
		m := &sdp.MediaDescription{
			MediaName:             sdp.MediaName{Media: kind, Port: sdp.RangedPort{Value: 9}, Protos: []string{"UDP", "TLS", "RTP", "SAVPF"}},
			ConnectionInformation: &sdp.ConnectionInformation{NetworkType: "IN", AddressType: "IP4", Address: &sdp.Address{Address: "0.0.0.0"}},
		}
		m = m.WithValueAttribute("mid", mid).
			WithICECredentials(ufrag, pwd).
			WithFingerprint(fpAlg, fp).
			WithValueAttribute("setup", "active").
			WithPropertyAttribute("rtcp-mux").
			WithPropertyAttribute("rtcp-rsize").
			WithPropertyAttribute("recvonly")
		if kind == "video" {
			m = m.WithCodec(96, "VP8", 90000, 0, "")
			m = m.WithValueAttribute("rtcp-fb", "96 nack").WithValueAttribute("rtcp-fb", "96 nack pli")
			m = m.WithCodec(102, "H264", 90000, 0, "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f")
			m = m.WithValueAttribute("rtcp-fb", "102 nack").WithValueAttribute("rtcp-fb", "102 nack pli")
		} else {
			m = m.WithCodec(111, "opus", 48000, 2, "minptime=10;useinbandfec=1")
		}
		return m.WithValueAttribute("candidate", cand).WithPropertyAttribute("end-of-candidates")
	}
	s.MediaDescriptions = []*sdp.MediaDescription{media("video", "0"), media("audio", "1")}
	b, err := s.Marshal()
	return string(b), err
}

// parseLeanAnswer reads the server's answer. family4 says the peer's socket is
// IPv4: only candidates of its family are usable.
func parseLeanAnswer(text string, family4 bool) (*leanAnswer, error) {
	var s sdp.SessionDescription
	if err := s.UnmarshalString(text); err != nil {
		return nil, fmt.Errorf("answer: %w", err)
	}
	a := &leanAnswer{ssrcKind: map[uint32]string{}}
	var best uint64
	take := func(attrs []sdp.Attribute, kind string, m *sdp.MediaDescription) error {
		for _, at := range attrs {
			switch at.Key {
			case "ice-ufrag":
				a.ufrag = at.Value
			case "ice-pwd":
				a.pwd = at.Value
			case "setup":
				a.setup = at.Value
			case "ice-lite":
				a.lite = true
			case "fingerprint":
				alg, fp, err := lean.ParseFingerprint(at.Value)
				if err != nil {
					return fmt.Errorf("answer: %w", err)
				}
				a.fpAlg, a.fp = alg, fp
			case "candidate":
				// foundation component transport priority address port typ type ...
				f := strings.Fields(at.Value)
				if len(f) < 8 || f[1] != "1" || !strings.EqualFold(f[2], "udp") {
					continue
				}
				prio, err1 := strconv.ParseUint(f[3], 10, 32)
				ip, err2 := netip.ParseAddr(f[4])
				port, err3 := strconv.ParseUint(f[5], 10, 16)
				if err1 != nil || err2 != nil || err3 != nil || port == 0 || ip.Unmap().Is4() != family4 {
					continue // mDNS names, other families, junk
				}
				if prio+1 > best {
					best = prio + 1
					a.remote = netip.AddrPortFrom(ip.Unmap(), uint16(port))
				}
			case "rtpmap":
				if m == nil {
					continue
				}
				pt, rest, ok := strings.Cut(at.Value, " ")
				n, err := strconv.Atoi(pt)
				if !ok || err != nil || n < 0 || n > 127 {
					continue
				}
				_, clock, _ := strings.Cut(rest, "/")
				clock, _, _ = strings.Cut(clock, "/")
				c, err := strconv.ParseUint(clock, 10, 32)
				if err != nil || c == 0 {
					continue
				}
				a.pts[n] = leanPT{kind: kind, clock: uint32(c)}
			case "ssrc":
				v, _, _ := strings.Cut(at.Value, " ")
				if n, err := strconv.ParseUint(v, 10, 32); err == nil && m != nil {
					a.ssrcKind[uint32(n)] = kind
				}
			}
		}
		return nil
	}
	if err := take(s.Attributes, "", nil); err != nil {
		return nil, err
	}
	for _, m := range s.MediaDescriptions {
		if m.MediaName.Port.Value == 0 {
			continue // rejected section
		}
		if err := take(m.Attributes, m.MediaName.Media, m); err != nil {
			return nil, err
		}
	}
	switch {
	case a.ufrag == "" || a.pwd == "":
		return nil, errors.New("answer: no ice-ufrag/ice-pwd")
	case a.fp == nil:
		return nil, errors.New("answer: no fingerprint")
	case a.setup == "active":
		return nil, errors.New("answer: setup:active, but the lean peer offered active (it is the DTLS client)")
	case !a.remote.IsValid():
		return nil, errors.New("answer: no usable UDP candidate (the lean peer does not trickle)")
	}
	return a, nil
}
