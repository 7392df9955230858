package record

import "github.com/petrel-sfu/petrel/sfu"

// A camera's Opus audio is recorded into the video's segments as track 2: the
// audio sink queues packets to the video recorder's goroutine, which owns the
// segment file; audio samples wait there and are written as one audio fragment
// after each video fragment, so the file stays interleaved by time at a
// second's granularity and a crash loses no more than the fragment being
// written. Decode times are wall-clock (48 kHz Unix time), anchored like the
// video's on arrival and then following the RTP clock, which keeps the two
// tracks in sync within the network's jitter. Audio before the first video
// keyframe of a segment is dropped (there is no file to put it in yet).

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

// audioPacket turns one Opus packet into a sample; its duration is known when
// the next one comes.
func (r *trackRec) audioPacket(q *qpkt) {
	t := r.aclk.at(q.ts, r.now())
	s := &sample{t: t, key: true, data: append([]byte(nil), q.buf[:q.n]...)}
	if h := r.aheld; h != nil {
		d := t - h.t
		if t <= h.t || d > maxOpusTicks {
			d = defaultOpusMs * audioClock / 1000 // a pause (DTX) or a clock jump
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

// attachAudio starts recording pub (the camera's Opus) with the video; the
// next segment declares the audio track. It returns the sink's remover.
func (r *trackRec) attachAudio(pub *sfu.Publication) func() {
	r.opus.Store(true)
	return pub.AddSink(audioSink{r})
}
