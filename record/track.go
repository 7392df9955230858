package record

import (
	"encoding/base64"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/petrel-sfu/petrel/sfu"
	"github.com/petrel-sfu/petrel/sfu/order"
)

// trackRec records one H.264 publication. Its sink copies packets into a bounded
// queue (the forwarding goroutine must never wait on a disk); one goroutine
// assembles access units, maps RTP time to wall-clock time and writes segments.
type trackRec struct {
	cam     *camStore
	pub     *sfu.Publication
	segDur  uint64 // segment length in ticks
	log     *slog.Logger
	onWrite func(fr Frag) // tests and metrics; nil is fine
	now     func() time.Time

	q       chan *qpkt
	pool    sync.Pool
	dropped atomic.Uint64
	done    chan struct{}
	stopped chan struct{}

	// Owned by the run goroutine.
	ord        order.Buffer[qpkt]
	asm        assembler
	curTS      uint32
	haveAU     bool
	lastSeq    uint16
	haveSeq    bool
	waitKey    bool // after loss: drop frames until the next keyframe
	clk        wallClock
	held       *sample // the newest frame, waiting for its successor to know its duration
	frag       []sample
	fragT      uint64
	seg        *segWriter
	lastKeyReq time.Time
	loggedSPS  bool

	// Audio (audio.go): the camera's audio, into the same segments as track 2.
	aq     chan *qpkt
	aconf  atomic.Pointer[AudioConf] // audio attached: new segments declare the track
	aclk   wallClock
	aheld  *sample
	afrag  []sample
	hasAud bool // the open segment declares the audio track
}

type qpkt struct {
	seq    uint16
	ts     uint32
	marker bool
	layer  int32 // the simulcast layer (room tracks)
	n      int
	buf    [1500]byte
}

const recQueue = 2048

func newTrackRec(cam *camStore, pub *sfu.Publication, segDur time.Duration, log *slog.Logger) *trackRec {
	r := &trackRec{cam: cam, pub: pub, segDur: uint64(segDur.Seconds() * clock), log: log,
		q: make(chan *qpkt, recQueue), aq: make(chan *qpkt, audioQueue), aclk: wallClock{rate: audioClock}, done: make(chan struct{}), stopped: make(chan struct{}), waitKey: true, now: time.Now}
	r.pool.New = func() any { return new(qpkt) }
	// Cameras that send SPS/PPS only out of band put them in the fmtp line.
	r.asm.sps, r.asm.pps = spropParameterSets(pub.Codec().SDPFmtpLine)
	return r
}

// spropParameterSets decodes sprop-parameter-sets=<SPS>,<PPS> from an fmtp line.
func spropParameterSets(fmtp string) (sps, pps []byte) {
	for _, kv := range strings.Split(fmtp, ";") {
		v, ok := strings.CutPrefix(strings.TrimSpace(kv), "sprop-parameter-sets=")
		if !ok {
			continue
		}
		for _, b64 := range strings.Split(v, ",") {
			n, err := base64.StdEncoding.DecodeString(b64)
			if err != nil || len(n) == 0 {
				continue
			}
			switch n[0] & 0x1f {
			case nalSPS:
				sps = n
			case nalPPS:
				pps = n
			}
		}
	}
	return sps, pps
}

// WriteRTP is the sink: called on the forwarding goroutine, it copies and queues.
func (r *trackRec) WriteRTP(pkt *sfu.Packet) {
	if pkt.Layer != 0 || len(pkt.Payload) > 1500 {
		return // the recording keeps the base simulcast layer
	}
	r.queue(r.q, pkt)
}

// queue copies pkt into a pooled buffer for the run goroutine; a full queue
// drops it (the forwarding goroutine never waits on a disk).
func (r *trackRec) queue(to chan *qpkt, pkt *sfu.Packet) {
	q := r.pool.Get().(*qpkt)
	q.seq, q.ts, q.marker = pkt.Header.SequenceNumber, pkt.Header.Timestamp, pkt.Header.Marker
	q.n = copy(q.buf[:], pkt.Payload)
	select {
	case to <- q:
	default:
		r.pool.Put(q)
		r.dropped.Add(1)
	}
}

func (r *trackRec) stop() {
	select {
	case <-r.done:
	default:
		close(r.done)
	}
	<-r.stopped
}

func (r *trackRec) run() {
	defer close(r.stopped)
	defer r.finish()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case q := <-r.q:
			r.packet(q)
		case q := <-r.aq:
			r.audioPacket(q)
			r.pool.Put(q)
		case <-tick.C:
			r.ord.Expire(r.now(), r.process)
			// A publisher that stops sending leaves its last GOP in memory; after a
			// few seconds of silence it goes to disk.
			if len(r.q) == 0 && r.held != nil && r.now().Sub(r.clk.lastWall) > 3*time.Second {
				r.flushHeld()
			}
		case <-r.done:
			for {
				select {
				case q := <-r.q:
					r.packet(q)
				default:
					r.ord.Flush(r.process)
					return
				}
			}
		}
	}
}

// packet puts q in sequence order (order.Buffer).
func (r *trackRec) packet(q *qpkt) {
	r.ord.Push(q, q.seq, r.now(), r.process, r.release)
}

func (r *trackRec) release(q *qpkt) { r.pool.Put(q) }

// process takes the packets in sequence order and builds access units.
func (r *trackRec) process(q *qpkt) {
	defer r.release(q)
	if r.haveSeq && q.seq != r.lastSeq+1 {
		// Lost (waited for in vain): the access unit in progress is damaged,
		// and the frames after it reference it. Wait for the next keyframe.
		r.asm.broke = true
		r.waitKey = true
		r.requestKey()
	}
	r.lastSeq, r.haveSeq = q.seq, true
	if q.n == 0 {
		return // padding
	}
	if r.haveAU && q.ts != r.curTS {
		r.endAU() // a marker bit was lost
	}
	r.curTS, r.haveAU = q.ts, true
	if err := r.asm.push(q.buf[:q.n]); err != nil {
		r.asm.broke = true
	}
	if q.marker {
		r.endAU()
	}
}

func (r *trackRec) requestKey() {
	if time.Since(r.lastKeyReq) > time.Second {
		r.lastKeyReq = time.Now()
		r.pub.RequestKeyframe()
	}
}

// endAU turns the assembled access unit into a sample.
func (r *trackRec) endAU() {
	a := &r.asm
	r.haveAU = false
	defer a.reset()
	if a.broke || len(a.buf) == 0 || a.inFU {
		return
	}
	if a.badSPS != nil && !r.loggedSPS {
		r.loggedSPS = true
		r.log.Warn("recording: ignored an SPS that does not parse", "sps", fmt.Sprintf("%x", a.badSPS))
	}
	if a.key {
		if len(a.sps) == 0 || len(a.pps) == 0 {
			r.requestKey()
			return // cannot start a file without parameter sets
		}
		r.waitKey = false
	} else if r.waitKey {
		return
	}
	data := a.buf
	if a.key && !hasParamSets(data) {
		// In-band parameter sets on every keyframe make each GOP decodable on its
		// own, which playback after a seek relies on.
		ps := make([]byte, 0, 8+len(a.sps)+len(a.pps)+len(data))
		ps = appendNAL(ps, a.sps)
		ps = appendNAL(ps, a.pps)
		data = append(ps, data...)
	} else {
		data = append([]byte(nil), data...)
	}
	t := r.clk.at(r.curTS, r.now())
	s := &sample{t: t, key: a.key, data: data}
	if r.held != nil {
		if t <= r.held.t {
			t = r.held.t + 1
			s.t = t
		}
		r.held.dur = uint32(min(t-r.held.t, 10*clock))
		r.addToFragment(*r.held, s)
	}
	r.held = s
}

func appendNAL(b, n []byte) []byte {
	b = append(b, byte(len(n)>>24), byte(len(n)>>16), byte(len(n)>>8), byte(len(n)))
	return append(b, n...)
}

// addToFragment appends a finished sample; next is the one after it. A fragment
// closes before a keyframe (so fragments start on keyframes) or after a second;
// a segment closes at the first keyframe after its duration.
func (r *trackRec) addToFragment(s sample, next *sample) {
	if r.seg == nil {
		if !s.key {
			return
		}
		if err := r.openSegment(s.t); err != nil {
			r.log.Error("recording: open segment", "err", err)
			return
		}
	}
	r.frag = append(r.frag, s)
	if next.key || next.t-r.frag[0].t >= clock {
		r.writeFragment()
		if next.key && next.t-r.seg.seg.Start >= r.segDur {
			r.closeSegment()
		}
	}
	if r.seg != nil && next.t-r.seg.seg.Start >= r.segDur && !next.key {
		r.requestKey() // end the segment soon rather than at the camera's next GOP
	}
}

func (r *trackRec) openSegment(t uint64) error {
	if err := makeDirDurable(r.cam.dir); err != nil {
		return err
	}
	aconf := r.aconf.Load()
	w, err := createSegment(r.cam.dir, t, r.asm.sps, r.asm.pps, 0, 0, aconf)
	if err != nil {
		return err
	}
	r.seg, r.hasAud = w, aconf != nil
	r.cam.add(w.seg)
	return nil
}

func (r *trackRec) writeFragment() {
	if len(r.frag) == 0 || r.seg == nil {
		r.frag = r.frag[:0]
		return
	}
	fr, err := r.seg.writeFragment(r.frag)
	r.frag = r.frag[:0]
	if err != nil {
		r.log.Error("recording: write fragment", "err", err, "path", r.seg.seg.Path)
		r.closeSegment()
		return
	}
	r.cam.appendFrag(r.seg.seg, fr)
	if r.onWrite != nil {
		r.onWrite(fr)
	}
	r.writeAudio()
}

func (r *trackRec) closeSegment() {
	if r.seg == nil {
		return
	}
	r.writeFragment()
	if err := r.seg.close(); err != nil {
		r.log.Error("recording: close segment", "err", err, "path", r.seg.seg.Path)
	}
	r.cam.closeSeg(r.seg.seg)
	r.log.Debug("recording: segment closed", "path", r.seg.seg.Path)
	r.seg = nil
}

// flushHeld writes the last frame with its predecessor's duration and closes
// the segment: the stream stopped.
func (r *trackRec) flushHeld() {
	if r.held == nil {
		return
	}
	h := *r.held
	r.held = nil
	h.dur = clock / 30
	if len(r.frag) > 0 {
		h.dur = r.frag[len(r.frag)-1].dur
	}
	if r.seg != nil || h.key {
		if r.seg == nil {
			if err := r.openSegment(h.t); err != nil {
				return
			}
		}
		r.frag = append(r.frag, h)
	}
	r.closeSegment()
	r.waitKey = true
}

func (r *trackRec) finish() { r.flushHeld(); r.closeSegment() }

// wallClock maps a track's RTP timestamps to Unix time in 90 kHz ticks: anchored
// to the arrival time of the first frame, then following the RTP clock (steadier
// than arrival times), re-anchored when the RTP clock jumps (a camera restart) or
// drifts more than a second from the wall clock.
type wallClock struct {
	init     bool
	baseTS   uint32
	ext      int64 // unwrapped ticks since baseTS
	lastTS   uint32
	base     uint64 // Unix time in ticks at baseTS
	lastWall time.Time
	rate     uint64 // ticks per second (0: the video clock)
}

func (c *wallClock) at(ts uint32, now time.Time) uint64 {
	c.lastWall = now
	rate := c.rate
	if rate == 0 {
		rate = clock
	}
	// Milliseconds, then the rest in microseconds: Unix µs times 90000 overflows.
	us := uint64(now.UnixNano()) / 1000
	nowT := us/1000*rate/1000 + us%1000*rate/1000000
	if !c.init {
		c.init, c.baseTS, c.lastTS, c.ext, c.base = true, ts, ts, 0, nowT
		return nowT
	}
	c.ext += int64(int32(ts - c.lastTS))
	c.lastTS = ts
	t := int64(c.base) + c.ext
	if d := t - int64(nowT); d > int64(rate) || d < -int64(rate) {
		c.baseTS, c.ext, c.base = ts, 0, nowT
		return nowT
	}
	return uint64(t)
}
