package record

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"

	"github.com/Eyevinn/mp4ff/mp4"
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
// recorded AAC (browsers take no AAC over WebRTC) goes through an AAC→Opus
// transcoder of its own (the camera gateway's ffmpeg one, SetAACPlayer), which
// runs while the session plays at 1x and is stopped on pause, at other rates
// and on close; its Opus comes out about one transcoding delay (some 80 ms)
// after the access units went in, and its first packets after a start wait
// for ffmpeg. Without a transcoder (no ffmpeg) AAC recordings play video only.

var opusCodec = sfu.Codec{MimeType: webrtc.MimeTypeOpus, ClockRate: audioClock, Channels: 2, SDPFmtpLine: "minptime=10;useinbandfec=1", PayloadType: 111}

// audioLead is how far past the frame shown the audio is sent (48 kHz ticks).
const audioLead = 2 * 960

type audioOut struct {
	codec string // the recording's ("opus", "pcmu", "pcma", "aac")
	// aac transcodes recorded AAC (codec "aac"); ts then counts AAC samples.
	aac   AACPlayer
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
		codec = sfu.Codec{MimeType: webrtc.MimeTypePCMU, ClockRate: 8000, Channels: 1, PayloadType: 0}
		if a.codec == "pcma" {
			codec.MimeType, codec.PayloadType = webrtc.MimeTypePCMA, 8
		}
	case "aac":
		f := s.rec.aacPlayer.Load()
		if f == nil {
			return nil // no transcoder: video only
		}
		asc, err := s.cam.aacConfig()
		if err != nil {
			s.rec.log.Warn("playback: AAC recording without its AudioSpecificConfig: video only", "camera", s.cam.id, "err", err)
			return nil
		}
		lt, err := s.part.PublishLocal(sfu.LocalTrackOptions{
			Info:  protocol.TrackInfo{Kind: "audio", Source: "microphone", Name: "playback", SSRC: a.ssrc},
			Codec: opusCodec, Queue: 512})
		if err != nil {
			return err
		}
		if a.aac, err = (*f)(asc, lt, a.ssrc); err != nil {
			lt.Close()
			s.rec.log.Warn("playback: AAC recording plays video only", "camera", s.cam.id, "err", err)
			return nil
		}
		a.track = lt
		s.aout = a
		return nil
	default:
		return nil // none
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
	if a.aac != nil {
		a.aac.SetActive(true)
	}
	cur := s.cur * audioClock / clock
	hi := cur + audioLead
	lo := a.sent
	if lo == 0 || lo > hi || hi-lo > audioClock {
		lo = cur // a jump: start at the frame shown
	}
	for _, smp := range s.audioBetween(lo, hi) {
		if a.aac != nil {
			// Continuous AAC timestamps, as for the other codecs' RTP.
			a.aac.Push(a.ts, smp.data)
			a.ts += 1024
			a.sent = smp.t + uint64(smp.dur)
			continue
		}
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

// setActive runs the AAC transcoder while the session plays at 1x.
func (a *audioOut) setActive(on bool) {
	if a != nil && a.aac != nil {
		a.aac.SetActive(on)
	}
}

// close stops the audio: the transcoder, then the track.
func (a *audioOut) close() {
	if a.aac != nil {
		a.aac.Close()
	}
	a.track.Close()
}

// aacConfig is the AudioSpecificConfig of the newest AAC segment (its esds).
func (c *camStore) aacConfig() ([]byte, error) {
	c.mu.Lock()
	path := ""
	for i := len(c.segs) - 1; i >= 0; i-- {
		if s := c.segs[i]; len(s.Audio) > 0 && segCodec(s) == "aac" {
			path = s.Path
			break
		}
	}
	c.mu.Unlock()
	if path == "" {
		return nil, errors.New("no AAC segment")
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var hdr [8]byte
	for off := int64(0); ; {
		if _, err := f.ReadAt(hdr[:], off); err != nil {
			return nil, fmt.Errorf("no moov: %w", err)
		}
		size := int64(binary.BigEndian.Uint32(hdr[:4]))
		if size < 8 || size > 1<<20 {
			return nil, fmt.Errorf("box of %d bytes before the moov", size)
		}
		if string(hdr[4:]) != "moov" {
			off += size
			continue
		}
		b := make([]byte, size)
		if _, err := f.ReadAt(b, off); err != nil {
			return nil, err
		}
		box, err := mp4.DecodeBox(0, bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("moov: %w", err)
		}
		moov, ok := box.(*mp4.MoovBox)
		if !ok {
			return nil, errors.New("moov does not decode")
		}
		for _, tr := range moov.Traks {
			if tr.Tkhd.TrackID != audioTrackID {
				continue
			}
			if m := tr.Mdia.Minf.Stbl.Stsd.Mp4a; m != nil && m.Esds != nil && len(m.Esds.DecConfigDescriptor.DecSpecificInfo.DecConfig) > 0 {
				return m.Esds.DecConfigDescriptor.DecSpecificInfo.DecConfig, nil
			}
		}
		return nil, errors.New("no mp4a/esds in the audio track")
	}
}

// PlaybackAudio is the audio publication of viewer's playback session of
// camera (nil without a session or without audio): what the viewer hears.
func (r *Recorder) PlaybackAudio(camera, viewer string) *sfu.Publication {
	r.mu.Lock()
	s := r.sessions[sessionKey{camera, viewer}]
	r.mu.Unlock()
	if s == nil || s.aout == nil {
		return nil
	}
	return s.aout.track.Publication()
}
