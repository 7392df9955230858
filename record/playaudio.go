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
// Recorded G.711 is played as PCMU/PCMA (its 8 kHz RTP clock), Opus as Opus;
// recorded AAC is not played back (playback is video only for it: browsers
// take no AAC over WebRTC, and playback does not run the transcoder).

var opusCodec = webrtc.RTPCodecParameters{
	RTPCodecCapability: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeOpus, ClockRate: audioClock, Channels: 2, SDPFmtpLine: "minptime=10;useinbandfec=1"},
	PayloadType:        111,
}

// audioLead is how far past the frame shown the audio is sent (48 kHz ticks).
const audioLead = 2 * 960

type audioOut struct {
	codec string // the recording's ("opus", "pcmu", "pcma")
	div   uint32 // 48 kHz ticks per RTP tick
	pt    uint8
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

// audioCodec is the codec of the newest segment with audio ("" if none).
func (c *camStore) audioCodec() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := len(c.segs) - 1; i >= 0; i-- {
		if s := c.segs[i]; len(s.Audio) > 0 {
			return segCodec(s)
		}
	}
	return ""
}

func segCodec(s *Segment) string {
	if s.ACodec == "" {
		return "opus"
	}
	return s.ACodec
}

// publishAudio adds the audio track to a playback session of a recording with
// Opus or G.711 audio.
func (s *Session) publishAudio() error {
	a := &audioOut{codec: s.cam.audioCodec(), ssrc: rand.Uint32(), seq: uint16(rand.Uint32()), ts: rand.Uint32(), div: 1}
	codec := opusCodec
	switch a.codec {
	case "opus":
	case "pcmu", "pcma":
		a.div = audioClock / 8000
		codec = webrtc.RTPCodecParameters{RTPCodecCapability: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypePCMU, ClockRate: 8000, Channels: 1}, PayloadType: 0}
		if a.codec == "pcma" {
			codec.MimeType, codec.PayloadType = webrtc.MimeTypePCMA, 8
		}
	default:
		return nil // none, or AAC: video only
	}
	a.pt = uint8(codec.PayloadType)
	lt, err := s.part.PublishLocal(sfu.LocalTrackOptions{
		Info:  protocol.TrackInfo{Kind: "audio", Source: "microphone", Name: "playback", SSRC: a.ssrc},
		Codec: codec, Queue: 512})
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
		a.pkt.Header = rtp.Header{Version: 2, PayloadType: a.pt, SequenceNumber: a.seq, Timestamp: a.ts, SSRC: a.ssrc}
		a.pkt.Payload = smp.data
		a.seq++
		a.ts += smp.dur / a.div
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
		if segCodec(seg) != s.aout.codec {
			continue // the camera changed codec: not this track's
		}
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
