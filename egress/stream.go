package egress

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bluenviron/gohlslib/v2"
	"github.com/bluenviron/gohlslib/v2/pkg/codecs"
	"github.com/bluenviron/gortsplib/v4/pkg/format/rtph264"
	"github.com/pion/rtp"

	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/sfu"
	"github.com/petrel-sfu/petrel/sfu/order"
)

// streamQueue is how many packets may wait for the muxer; beyond it the sink
// drops and the video waits for its next keyframe.
const streamQueue = 1024

// maxWaiting bounds the requests of one stream waiting for media at once
// (blocking playlist reloads, the first segment).
const maxWaiting = 256

// pkt is one copied packet of a sink (the HLS muxer's, an RTMP egress's);
// buf is pooled.
type pkt struct {
	audio   bool // the HLS muxer's audio track
	key     bool // a keyframe's packet (the RTMP egress starts a layer on one)
	layer   int8
	seq     uint16
	ts      uint32
	marker  bool
	arrival time.Time
	n       int
	buf     [1500]byte
}

// stream is one muxer fed by the sinks on a video and/or an audio publication.
type stream struct {
	cfg   config.HLS
	log   *slog.Logger
	m     *gohlslib.Muxer
	vt    *gohlslib.Track
	at    *gohlslib.Track
	video *sfu.Publication
	audio *sfu.Publication

	q       chan *pkt
	pool    sync.Pool
	removes []func()
	lastUse atomic.Int64
	waiting atomic.Int32
	errLog  atomic.Int64    // last error logged (Unix ns): the muxer and requests log
	choice  sfu.LayerChoice // the simulcast layer muxed
	done    chan struct{}
	stopped chan struct{}
	once    sync.Once

	// Owned by run.
	vord       order.Buffer[pkt]
	start      time.Time
	dec        rtph264.Decoder
	sps, pps   []byte
	vclk, aclk clock
	curLayer   int8
	lastSeq    uint16
	haveSeq    bool
	waitKey    bool
	lastKey    time.Time
	lastKeyReq time.Time
}

// clock maps a track's RTP time onto the muxer's timeline: its first packet
// goes at its arrival since the stream started, the rest follow the RTP clock.
type clock struct {
	set  bool
	last uint32
	pts  int64
}

func (c *clock) at(ts uint32, arrival, start time.Time, rate int64) int64 {
	if !c.set {
		c.set, c.last = true, ts
		c.pts = int64(arrival.Sub(start)) * rate / int64(time.Second)
		return c.pts
	}
	c.pts += int64(int32(ts - c.last))
	c.last = ts
	return c.pts
}

// ffmpeg is the transcoder's binary, for video that is not H.264.
func startStream(cfg config.HLS, ffmpeg string, video, audio *sfu.Publication, log *slog.Logger) (*stream, error) {
	s := &stream{cfg: cfg, log: log, video: video, audio: audio, q: make(chan *pkt, streamQueue),
		done: make(chan struct{}), stopped: make(chan struct{}), start: time.Now(), waitKey: true}
	s.pool.New = func() any { return new(pkt) }
	var tracks []*gohlslib.Track
	if video != nil {
		s.vt = &gohlslib.Track{Codec: &codecs.H264{}, ClockRate: 90000}
		s.sps, s.pps = spropParameterSets(video.Codec().SDPFmtpLine)
		tracks = append(tracks, s.vt)
	}
	if audio != nil {
		ch := int(audio.Codec().Channels)
		if ch < 1 || ch > 2 {
			ch = 2
		}
		s.at = &gohlslib.Track{Codec: &codecs.Opus{ChannelCount: ch}, ClockRate: 48000}
		tracks = append(tracks, s.at)
	}
	s.m = &gohlslib.Muxer{
		Tracks:             tracks,
		Variant:            gohlslib.MuxerVariantLowLatency,
		SegmentCount:       7,
		SegmentMinDuration: cfg.Segment,
		PartMinDuration:    cfg.Part,
		OnEncodeError:      s.encodeError,
	}
	if err := s.m.Start(); err != nil {
		return nil, err
	}
	if err := s.dec.Init(); err != nil {
		s.m.Close()
		return nil, err
	}
	s.lastUse.Store(time.Now().UnixNano())
	go s.run()
	// The sinks go on last: the run goroutine is there to drain them. A
	// video sink asks the publisher for a keyframe, where the first segment starts.
	switch {
	case video != nil && transcodable(video.Codec().MimeType):
		tc, err := startTranscoder(ffmpeg, cfg.Segment, video, func(h *rtp.Header, payload []byte) { s.enqueue(false, 0, h, payload) }, s.encodeError)
		if err != nil {
			s.close()
			return nil, err
		}
		s.removes = append(s.removes, tc.close)
	case video != nil:
		s.removes = append(s.removes, video.AddSink(videoSink{s}))
	}
	if audio != nil {
		s.removes = append(s.removes, audio.AddSink(audioSink{s}))
	}
	return s, nil
}

func (s *stream) close() {
	s.once.Do(func() {
		for _, rm := range s.removes {
			rm()
		}
		close(s.done)
		<-s.stopped
		s.m.Close()
	})
}

func (s *stream) closed() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

func (s *stream) encodeError(err error) {
	now := time.Now().UnixNano()
	if last := s.errLog.Load(); now-last > int64(10*time.Second) && s.errLog.CompareAndSwap(last, now) {
		s.log.Warn("hls: muxing", "err", err)
	}
}

type videoSink struct{ s *stream }
type audioSink struct{ s *stream }

// WriteRTP runs on the forwarding goroutine: pick the layer, copy, queue,
// never block.
func (v videoSink) WriteRTP(p *sfu.Packet) {
	if v.s.choice.Take(p) {
		v.s.queue(p, false)
	}
}

func (a audioSink) WriteRTP(p *sfu.Packet) { a.s.queue(p, true) }

func (s *stream) queue(p *sfu.Packet, audio bool) {
	if audio && len(p.Payload) == 0 {
		return
	}
	s.enqueue(audio, p.Layer, &p.Header, p.Payload)
}

// enqueue copies a packet for the run goroutine; a full queue drops it.
func (s *stream) enqueue(audio bool, layer int8, h *rtp.Header, payload []byte) {
	if len(payload) > 1500 {
		return
	}
	q := s.pool.Get().(*pkt)
	q.audio, q.layer, q.seq, q.ts, q.marker = audio, layer, h.SequenceNumber, h.Timestamp, h.Marker
	q.arrival = time.Now()
	q.n = copy(q.buf[:], payload)
	select {
	case s.q <- q:
	default:
		s.pool.Put(q)
	}
}

func (s *stream) run() {
	defer close(s.stopped)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-s.done:
			return
		case q := <-s.q:
			if q.audio {
				s.writeAudio(q)
				s.pool.Put(q)
				continue
			}
			if q.layer != s.curLayer {
				s.vord.Flush(s.videoInOrder) // another layer, another sequence
			}
			s.vord.Push(q, q.seq, time.Now(), s.videoInOrder, s.release)
		case <-tick.C:
			s.vord.Expire(time.Now(), s.videoInOrder)
			// A segment starts at a keyframe: a WebRTC publisher sends one only
			// when asked, so the muxer asks when the GOP outgrows two segments.
			if s.video != nil && time.Since(s.lastKey) > 2*s.cfg.Segment {
				s.requestKey()
			}
		}
	}
}

func (s *stream) requestKey() {
	if time.Since(s.lastKeyReq) < time.Second {
		return
	}
	s.lastKeyReq = time.Now()
	if s.curLayer > 0 {
		s.video.RequestLayerKeyframe(s.curLayer)
	} else {
		s.video.RequestKeyframe()
	}
}

func (s *stream) writeAudio(q *pkt) {
	pts := s.aclk.at(q.ts, q.arrival, s.start, 48000)
	if err := s.m.WriteOpus(s.at, q.arrival, pts, [][]byte{append([]byte(nil), q.buf[:q.n]...)}); err != nil {
		s.encodeError(err)
	}
}

func (s *stream) release(q *pkt) { s.pool.Put(q) }

// videoInOrder takes the video packets in sequence order (order.Buffer).
func (s *stream) videoInOrder(q *pkt) {
	s.writeVideo(q)
	s.pool.Put(q)
}

func (s *stream) writeVideo(q *pkt) {
	if q.layer != s.curLayer && s.haveSeq {
		// Another simulcast layer: another clock and picture size; the
		// muxer starts a segment at its first keyframe.
		s.dec.Init() //nolint:errcheck // Init of a decoder never fails
		s.vclk, s.haveSeq, s.waitKey = clock{}, false, true
		s.video.RequestLayerKeyframe(q.layer)
	}
	s.curLayer = q.layer
	if s.haveSeq && q.seq != s.lastSeq+1 {
		// Lost (waited for in vain): the frames after reference it.
		s.waitKey = true
		s.dec.Init() //nolint:errcheck
		s.requestKey()
	}
	s.lastSeq, s.haveSeq = q.seq, true
	if q.n == 0 {
		return // padding
	}
	// The decoder keeps the NALUs of a frame across packets, and q goes back
	// to the pool: it decodes a copy (on this goroutine, not the forwarding one).
	au, err := s.dec.Decode(&rtp.Packet{Header: rtp.Header{Marker: q.marker, SequenceNumber: q.seq, Timestamp: q.ts},
		Payload: append([]byte(nil), q.buf[:q.n]...)})
	if err != nil {
		if !errors.Is(err, rtph264.ErrMorePacketsNeeded) && !errors.Is(err, rtph264.ErrNonStartingPacketAndNoPrevious) {
			s.waitKey = true
		}
		return
	}
	// The muxer keeps the SPS and PPS it is given, and the NALUs may point into
	// the pooled packet: they go as copies that are never written again.
	idr, hasSPS, hasPPS := false, false, false
	for i, n := range au {
		if len(n) == 0 {
			continue
		}
		switch n[0] & 0x1f {
		case 5:
			idr = true
		case 7:
			hasSPS = true
			if !bytes.Equal(n, s.sps) {
				s.sps = bytes.Clone(n)
			}
			au[i] = s.sps
		case 8:
			hasPPS = true
			if !bytes.Equal(n, s.pps) {
				s.pps = bytes.Clone(n)
			}
			au[i] = s.pps
		}
	}
	if idr {
		s.lastKey, s.waitKey = time.Now(), false
		if !hasSPS || !hasPPS {
			if len(s.sps) == 0 || len(s.pps) == 0 {
				s.waitKey = true // a keyframe nothing can decode
				return
			}
			au = append([][]byte{s.sps, s.pps}, au...)
		}
	} else if s.waitKey {
		s.requestKey()
		return
	}
	pts := s.vclk.at(q.ts, q.arrival, s.start, 90000)
	if err := s.m.WriteH264(s.vt, q.arrival, pts, au); err != nil {
		s.encodeError(err)
	}
}

// handle answers one request from the muxer within timeout; the muxer may
// hold it (the first segment, a blocking reload) while media is not there.
func (s *stream) handle(w http.ResponseWriter, r *http.Request, timeout time.Duration) {
	if s.waiting.Add(1) > maxWaiting {
		s.waiting.Add(-1)
		writeError(w, &httpError{http.StatusServiceUnavailable, protocol.CodeServerBusy, "too many requests waiting on this stream"})
		return
	}
	rec := &recorder{header: http.Header{}}
	done := make(chan struct{})
	deadline := time.Now().Add(timeout)
	go func() {
		defer s.waiting.Add(-1)
		defer close(done)
		// Not net/http's goroutine: a panic in the muxer must not end the server.
		defer func() {
			if p := recover(); p != nil {
				s.encodeError(fmt.Errorf("the muxer panicked on %s: %v", r.URL.Path, p))
				rec.status, rec.header = http.StatusInternalServerError, http.Header{}
				rec.body.Reset()
			}
		}()
		s.m.Handle(rec, r)
		// The multivariant playlist can fail while the first segments are
		// being made (the muxer then answers 500): ask again until the bound.
		for r.URL.Path != "" && strings.HasSuffix(r.URL.Path, "/index.m3u8") && rec.status >= 500 && rec.body.Len() == 0 &&
			time.Now().Add(100*time.Millisecond).Before(deadline) && !s.closed() {
			time.Sleep(100 * time.Millisecond)
			rec.status, rec.header = 0, http.Header{}
			s.m.Handle(rec, r)
		}
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		writeError(w, &httpError{http.StatusServiceUnavailable, protocol.CodeServerBusy,
			"no media within " + timeout.String() + " (the publisher sends nothing, or _HLS_msn/_HLS_part is not produced yet)"})
		return
	case <-r.Context().Done():
		return
	}
	switch {
	case rec.status == 0 && rec.body.Len() == 0:
		writeError(w, &httpError{http.StatusNotFound, protocol.CodeNotFound, "no such HLS file (a segment or part that expired, or a muxer restarted: reload the playlist)"})
		return
	case rec.status == http.StatusBadRequest && rec.body.Len() == 0:
		writeError(w, &httpError{http.StatusBadRequest, protocol.CodeBadRequest, "_HLS_msn/_HLS_part/_HLS_skip are not numbers, or name a segment outside the playlist"})
		return
	case rec.status >= 500 && rec.body.Len() == 0:
		s.encodeError(fmt.Errorf("the muxer answered %d to %s", rec.status, r.URL.Path))
		writeError(w, &httpError{http.StatusServiceUnavailable, protocol.CodeServerBusy, "the stream stopped; reload the playlist"})
		return
	}
	for k, v := range rec.header {
		w.Header()[k] = v
	}
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	w.WriteHeader(rec.status)
	_, _ = w.Write(rec.body.Bytes())
}

// spropParameterSets reads H.264 SPS and PPS from an fmtp line's
// sprop-parameter-sets, for publishers that send them only out of band.
func spropParameterSets(fmtp string) (sps, pps []byte) {
	for _, kv := range bytes.Split([]byte(fmtp), []byte(";")) {
		k, v, ok := bytes.Cut(bytes.TrimSpace(kv), []byte("="))
		if !ok || string(k) != "sprop-parameter-sets" {
			continue
		}
		for _, p := range bytes.Split(v, []byte(",")) {
			n := make([]byte, base64.StdEncoding.DecodedLen(len(p)))
			m, err := base64.StdEncoding.Decode(n, p)
			if err != nil || m == 0 {
				continue
			}
			switch n[0] & 0x1f {
			case 7:
				sps = n[:m]
			case 8:
				pps = n[:m]
			}
		}
	}
	return sps, pps
}
