package record

import (
	"strings"

	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/sfu"
)

// A camera's audio (Opus, G.711 or AAC) is recorded into the video's segments as track 2: the
// audio sink queues packets to the video recorder's goroutine, which owns the
// segment file; audio samples wait there and are written as one audio fragment
// after each video fragment, so the file stays interleaved by time at a
// second's granularity and a crash loses no more than the fragment being
// written. Decode times are wall-clock (48 kHz Unix time), anchored like the
// video's on arrival and then following the RTP clock, which keeps the two
// tracks in sync within the network's jitter. Audio before the first video
// keyframe of a segment is dropped (there is no file to put it in yet).
//
// Whatever the codec, the audio track's timescale is 48 kHz, so that the
// index, playback and export treat every recording alike. Opus and G.711 come
// from the camera's audio publication as RTP payloads (G.711: one sample of
// 20 ms or so per packet, 'ulaw' or 'alaw' sample entry); AAC comes from the
// camera itself (an AudioSource: the room carries it as transcoded Opus) as
// access units, recorded as they are under an 'mp4a' sample entry whose esds
// holds the camera's AudioSpecificConfig.

// AudioConf is the audio a camera's segments carry.
type AudioConf struct {
	Codec    string // "opus", "pcmu", "pcma" or "aac"
	Rate     int    // the source's RTP clock: 48000, 8000, the AAC sample rate
	Channels int
	ASC      []byte // AAC's AudioSpecificConfig
}

// AudioSource hands the recorder a camera's audio that its room does not
// carry as recorded (AAC): deliver gets each access unit and its RTP
// timestamp, on the camera's goroutine, and must not block. ok is false when
// the camera has no such audio.
type AudioSource func(camera string, deliver func(ts uint32, au []byte)) (conf AudioConf, stop func(), ok bool)

// confOf is the AudioConf of an RTP audio publication the recorder takes as it is.
func confOf(pub *sfu.Publication) (AudioConf, bool) {
	c := pub.Codec()
	switch {
	case strings.EqualFold(c.MimeType, webrtc.MimeTypeOpus):
		return AudioConf{Codec: "opus", Rate: audioClock, Channels: 2}, true
	case strings.EqualFold(c.MimeType, webrtc.MimeTypePCMU) && c.ClockRate == 8000:
		return AudioConf{Codec: "pcmu", Rate: 8000, Channels: 1}, true
	case strings.EqualFold(c.MimeType, webrtc.MimeTypePCMA) && c.ClockRate == 8000:
		return AudioConf{Codec: "pcma", Rate: 8000, Channels: 1}, true
	}
	return AudioConf{}, false
}

// nominal is a sample's own duration in 48 kHz ticks, from its codec and size.
func (c *AudioConf) nominal(n int) uint32 {
	switch c.Codec {
	case "pcmu", "pcma":
		return uint32(n * audioClock / 8000)
	case "aac":
		return uint32(1024 * audioClock / c.Rate)
	}
	return defaultOpusMs * audioClock / 1000
}

const (
	audioQueue    = 512
	maxAudioHeld  = 3 * 50 // samples waiting for a fragment: 3 s of 20 ms packets
	defaultOpusMs = 20     // duration of the last packet before a pause
	maxOpusTicks  = 5760   // 120 ms, Opus' longest packet
)

// audioSink is the sink on the camera's audio publication.
type audioSink struct{ r *trackRec }

// WriteRTP runs on the forwarding goroutine: copy, queue, never block.
func (s audioSink) WriteRTP(pkt *sfu.Packet) {
	if len(pkt.Payload) == 0 || len(pkt.Payload) > 1500 {
		return
	}
	s.r.queue(s.r.aq, pkt)
}

// audioPacket turns one packet (or access unit) into a sample; its duration
// is known when the next one comes.
func (r *trackRec) audioPacket(q *qpkt) {
	conf := r.aconf.Load()
	if conf == nil || conf.Rate <= 0 {
		return
	}
	if r.aclk.rate != uint64(conf.Rate) {
		r.aclk = wallClock{rate: uint64(conf.Rate)}
	}
	t := r.aclk.at(q.ts, r.now())
	if conf.Rate != audioClock {
		t = t * audioClock / uint64(conf.Rate)
	}
	s := &sample{t: t, key: true, dur: conf.nominal(q.n), data: append([]byte(nil), q.buf[:q.n]...)}
	if h := r.aheld; h != nil {
		d := t - h.t
		if t <= h.t || d > uint64(max(maxOpusTicks, 3*h.dur)) {
			d = uint64(h.dur) // a pause (DTX), a loss or a clock jump
		}
		h.dur = uint32(d)
		if len(r.afrag) < maxAudioHeld {
			r.afrag = append(r.afrag, *h)
		}
	}
	r.aheld = s
}

// writeAudio writes the waiting audio samples as one fragment of the open
// segment, if it declares the audio track; otherwise they are dropped.
func (r *trackRec) writeAudio() {
	if len(r.afrag) == 0 {
		return
	}
	defer func() { r.afrag = r.afrag[:0] }()
	if r.seg == nil || !r.hasAud {
		return
	}
	fr, err := r.seg.writeTrack(audioTrackID, r.afrag)
	if err != nil {
		r.log.Error("recording: write audio fragment", "err", err, "path", r.seg.seg.Path)
		return
	}
	r.cam.appendAudio(r.seg.seg, fr)
}

// attachAudio starts recording pub (the camera's Opus or G.711) with the
// video; the next segment declares the audio track. It returns the sink's remover.
func (r *trackRec) attachAudio(pub *sfu.Publication, conf AudioConf) func() {
	r.aconf.Store(&conf)
	return pub.AddSink(audioSink{r})
}

// sourceFeed is the deliver function for an AudioSource: copy, queue, never
// block. Access units before the AudioConf is stored are dropped.
func (r *trackRec) sourceFeed() func(ts uint32, au []byte) {
	return func(ts uint32, au []byte) {
		if len(au) == 0 || len(au) > 1500 {
			return
		}
		q := r.pool.Get().(*qpkt)
		q.ts, q.n = ts, copy(q.buf[:], au)
		select {
		case r.aq <- q:
		default:
			r.pool.Put(q)
			r.dropped.Add(1)
		}
	}
}
