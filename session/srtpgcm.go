package session

import (
	"encoding/binary"

	"github.com/pion/dtls/v3"
	"github.com/pion/srtp/v3"

	"github.com/petrel-sfu/petrel/rtc/lean"
)

// gcmTx protects a viewer's RTP for the AES-GCM profiles (RFC 7714) on
// crypto/cipher, keyed from the master key DTLS exported: the packet is
// built in the output buffer and sealed in place. pion/srtp's EncryptRTP
// costs twice its AES-GCM seal (a per-SSRC map lookup, the header marshalled
// again, rollover bookkeeping behind locks) and needs the plaintext in a
// second buffer; RTCP still goes through pion/srtp. Used under the viewer's
// write lock.
type gcmTx struct {
	lean.GCM
	// ssrcs holds every stream's rollover counter: one evicted and made
	// again would start from ROC 0, and after its sequence numbers wrapped
	// the receiver could not authenticate it any more. A WHEP viewer has
	// two streams, a room subscriber one per track; a track's stream is
	// forgotten when its section goes (RemoveTrack). last is the index of
	// the last one used (packets come in runs of one stream); tick counts
	// packets, for each stream's last use.
	ssrcs []gcmTxSSRC
	last  int
	tick  uint64
}

// maxTxSSRCs bounds the streams a viewer keeps counters for: twice a
// session's media sections (maxSections), so that with the streams of
// removed tracks forgotten the table never fills; if a stream sent after
// its removal fills it, the one unused longest goes, never one still sent.
const maxTxSSRCs = 2 * maxSections

// gcmTxSSRC is one stream's rollover counter: the highest sequence number
// sent and the ROC it was sent with.
type gcmTxSSRC struct {
	ssrc    uint32
	started bool
	roc     uint32
	last    uint16
	used    uint64 // the tick of its last packet
}

const gcmTag = 16

// newGCMTx returns the sealer for an AES-GCM profile, nil for the others.
func newGCMTx(prof srtp.ProtectionProfile, masterKey, masterSalt []byte) (*gcmTx, error) {
	k, err := lean.NewGCM(prof, masterKey, masterSalt)
	if k == nil || err != nil {
		return nil, err
	}
	return &gcmTx{GCM: *k}, nil
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
		// The ROC a receiver will guess for seq: a retransmission from
		// before a wrap keeps the previous one.
		roc = lean.GuessROC(s.roc, s.last, seq)
		if uint64(roc)<<16|uint64(seq) > uint64(s.roc)<<16|uint64(s.last) {
			s.roc, s.last = roc, seq
		}
	}
	return buf[:hl+len(g.AEAD.Seal(buf[hl:hl], g.IV(ssrc, roc, seq), buf[hl:n], buf[:hl]))]
}

func (g *gcmTx) state(ssrc uint32) *gcmTxSSRC {
	g.tick++
	if g.last < len(g.ssrcs) && g.ssrcs[g.last].ssrc == ssrc {
		g.ssrcs[g.last].used = g.tick
		return &g.ssrcs[g.last]
	}
	for i := range g.ssrcs {
		if g.ssrcs[i].ssrc == ssrc {
			g.last = i
			g.ssrcs[i].used = g.tick
			return &g.ssrcs[i]
		}
	}
	if len(g.ssrcs) == maxTxSSRCs {
		lru := 0
		for i := range g.ssrcs {
			if g.ssrcs[i].used < g.ssrcs[lru].used {
				lru = i
			}
		}
		g.ssrcs[lru] = g.ssrcs[len(g.ssrcs)-1]
		g.ssrcs = g.ssrcs[:len(g.ssrcs)-1]
	}
	g.ssrcs = append(g.ssrcs, gcmTxSSRC{ssrc: ssrc, used: g.tick})
	g.last = len(g.ssrcs) - 1
	return &g.ssrcs[g.last]
}

// forget drops the counter of a stream that will not be sent again.
func (g *gcmTx) forget(ssrc uint32) {
	for i := range g.ssrcs {
		if g.ssrcs[i].ssrc == ssrc {
			g.ssrcs[i] = g.ssrcs[len(g.ssrcs)-1]
			g.ssrcs = g.ssrcs[:len(g.ssrcs)-1]
			g.last = 0
			return
		}
	}
}

// viewerGCM is the sealer for a finished server handshake (nil for AES-CM).
func viewerGCM(dc *dtls.Conn, client bool) (*gcmTx, error) {
	k, err := lean.GCMFromDTLS(dc, client, true)
	if k == nil || err != nil {
		return nil, err
	}
	return &gcmTx{GCM: *k}, nil
}
