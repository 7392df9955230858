package record

import (
	"math/rand/v2"
	"os"
	"strings"

	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/sfu"
)

// Playback of recorded audio: a recording with Opus (audio.go) gets a second
// track on the playback participant, and while playing at 1x each video
// frame sent is followed by the audio up to two packets past it, so the audio
// runs just ahead of the picture it belongs to. Paused, stepping, seeking and
// other rates are silent (no audio resampling); after a jump the audio starts
// again at the frame shown. RTP timestamps of the audio are continuous (each
// packet's duration), so the viewer's jitter buffer sees one stream.

var opusCodec = webrtc.RTPCodecParameters{
	RTPCodecCapability: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeOpus, ClockRate: audioClock, Channels: 2, SDPFmtpLine: "minptime=10;useinbandfec=1"},
	PayloadType:        111,
}

// audioLead is how far past the frame shown the audio is sent (48 kHz ticks).
const audioLead = 2 * 960

type audioOut struct {
	track *sfu.LocalTrack
	ssrc  uint32
	seq   uint16
	ts    uint32
	sent  uint64 // decode time (48 kHz) up to which audio went out; 0: start at the frame
	pkt   rtp.Packet
	// The audio fragment read last, kept: each is read once per second of play.
	cachePath string
	cacheOff  int64
	cache     []sample
}

// hasAudio reports whether any of the camera's segments holds audio.
func (c *camStore) hasAudio() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.segs {
		if len(s.Audio) > 0 {
			return true
		}
	}
	return false
}

// publishAudio adds the Opus track to a playback session of a recording with audio.
func (s *Session) publishAudio() error {
	if !s.cam.hasAudio() {
		return nil
	}
	a := &audioOut{ssrc: rand.Uint32(), seq: uint16(rand.Uint32()), ts: rand.Uint32()}
	lt, err := s.part.PublishLocal(sfu.LocalTrackOptions{
		Info:  protocol.TrackInfo{Kind: "audio", Source: "microphone", Name: "playback", SSRC: a.ssrc},
		Codec: opusCodec, Queue: 512})
	if err != nil {
		return err
	}
	a.track = lt
	s.aout = a
	return nil
}

// playAudio sends the audio that goes with the frame just shown.
func (s *Session) playAudio() {
	a := s.aout
	if a == nil {
		return
	}
	if s.rate != 1 || !s.haveCur {
		a.sent = 0
		return
	}
	cur := s.cur * audioClock / clock
	hi := cur + audioLead
	lo := a.sent
	if lo == 0 || lo > hi || hi-lo > audioClock {
		lo = cur // a jump: start at the frame shown
	}
	for _, smp := range s.audioBetween(lo, hi) {
		a.pkt.Header = rtp.Header{Version: 2, PayloadType: uint8(opusCodec.PayloadType), SequenceNumber: a.seq, Timestamp: a.ts, SSRC: a.ssrc}
		a.pkt.Payload = smp.data
		a.seq++
		a.ts += smp.dur
		if err := a.track.WritePacket(&a.pkt); err != nil && !strings.Contains(err.Error(), "closed") {
			s.rec.log.Debug("playback: write audio", "err", err)
		}
		a.sent = smp.t + uint64(smp.dur)
	}
	if a.sent < lo {
		a.sent = lo // nothing recorded there: go on from here
	}
}

// audioBetween returns the recorded audio samples starting in [lo, hi).
func (s *Session) audioBetween(lo, hi uint64) []sample {
	type part struct {
		path string
		fr   Frag
	}
	var parts []part
	c := s.cam
	c.mu.Lock()
	for _, seg := range c.segs {
		for _, fr := range seg.Audio {
			if fr.T < hi && fr.End() > lo {
				parts = append(parts, part{seg.Path, fr})
			}
		}
	}
	c.mu.Unlock()
	var out []sample
	a := s.aout
	for _, p := range parts {
		if a.cachePath != p.path || a.cacheOff != p.fr.Off {
			f, err := os.Open(p.path)
			if err != nil {
				continue
			}
			ss, err := readFragment(f, p.fr)
			f.Close()
			if err != nil {
				s.rec.log.Warn("playback: read audio", "camera", c.id, "err", err)
				continue
			}
			a.cachePath, a.cacheOff, a.cache = p.path, p.fr.Off, ss
		}
		for _, smp := range a.cache {
			if smp.t >= lo && smp.t < hi {
				out = append(out, smp)
			}
		}
	}
	return out
}
