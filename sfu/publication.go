package sfu

import (
	"errors"
	"io"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/rtcp"

	"github.com/petrel-sfu/petrel/metrics"
	"github.com/petrel-sfu/petrel/protocol"
)

// Publication is one track a participant publishes, with one layer per simulcast
// encoding (a single layer otherwise). Each layer's reader goroutine is the start
// of the packet path: read from the publisher's connection, store in the layer's
// packet cache, hand the same parsed packet to every subscriber's DownTrack.
//
// The subscriber list is an immutable slice swapped atomically (copy on write), so
// the per-packet loop takes no lock shared with the room or other tracks.
type Publication struct {
	sid   string
	owner *Participant
	kind  Kind
	codec Codec
	ck    codecKind
	// alternate: a re-encoding of another video track of its owner
	// (LocalTrackOptions.Alternate), set before it is published.
	alternate bool

	cacheSize int

	infoMu sync.Mutex
	info   protocol.TrackInfo

	layerMu sync.Mutex
	layers  [maxLayers]atomic.Pointer[layer]

	downMu sync.Mutex
	downs  atomic.Pointer[[]*DownTrack]
	sinks  atomic.Pointer[[]Sink] // local.go; nil or empty when none

	muted atomic.Bool
	// audioWithheld: audio Last-N leaves this audio track out (audiolastn.go);
	// replayFrom is where its subscribers' replay starts when it comes back.
	audioWithheld atomic.Bool
	replayFrom    atomic.Int64
	// gopStart: new subscribers start from the cached last keyframe (gop.go).
	gopStart atomic.Bool
	// demand is the last trackDemand sent to the publisher (packDemand).
	demand   atomic.Uint32
	demandMu sync.Mutex // serializes computing and sending demand
	// neededAt is when each layer, and (last) the track, was last needed by
	// someone (guarded by demandMu; see demandOffDelay).
	neededAt [maxLayers + 1]int64

	packets atomic.Uint64
	bytes   atomic.Uint64

	svc svcPub // scalable video in one stream (svc.go)
}

// Alternate reports whether the track is a re-encoding of another video track
// of its owner (LocalTrackOptions.Alternate).
func (t *Publication) Alternate() bool { return t.alternate }

// maxLayers is the number of simulcast encodings a track may have.
const maxLayers = 3

// layer is one encoding of a publication: its own SSRC, reader, cache and clock.
type layer struct {
	index    int8
	pub      *Publication
	src      Source
	cache    *PacketCache
	lastPLI  atomic.Int64 // monotonic ns of the last keyframe request sent upstream
	lastRecv atomic.Int64 // monotonic ns of the last packet: a silent layer is not chosen
	lastKey  atomic.Int64 // monotonic ns of the last keyframe packet
	bytes    atomic.Uint64
	bps      atomic.Int64 // measured incoming bitrate (allocate.go)
	peak     atomic.Int64 // bps's recent peak, decaying (allocate.go)
	// prevBytes is touched only by the room's loop.
	prevBytes uint64
	deferred  atomic.Bool // a keyframe request waits for the end of the window
	// keyWait: until then a keyframe asked for at a speaker change is on its
	// way (lastn.go) and requests from receivers are served by it.
	keyWait atomic.Int64

	// Audio: the RFC 6464 audio-level extension id and the speaker record it feeds.
	levelExt uint8
	speaker  *activity
	// The replay of recent audio to a subscriber when the track is selected
	// (audiolastn.go), reused: the reader goroutine alone uses them.
	replayBuf []byte
	replayPkt Packet

	// Publisher's clock mapping from its last sender report: the RTP time srRTP was
	// current at local monotonic time srAt. Sender reports to subscribers derive from it.
	srRTP atomic.Uint32
	srAt  atomic.Int64

	gop gopIndex // where the last keyframe begins (gop.go)

	trates temporalRates // VP8 temporal layers (temporal.go)

	svc svcLayer // VP9/AV1 layer parsing (svc.go)
}

// minKeyframeInterval aggregates keyframe requests: every subscriber asking within
// this window is served by the same keyframe.
const minKeyframeInterval = 300 * time.Millisecond

// epoch lies an hour back so that a zero timestamp ("never") is always long
// ago: with epoch at process start, the first keyframe request in the first
// 300 ms was taken for a repeat and dropped.
var epoch = time.Now().Add(-time.Hour)

// now is a monotonic clock in nanoseconds, cheap enough for the packet path.
func now() int64 { return int64(time.Since(epoch)) }

// layerOf maps a simulcast RID to a quality index, 0 the lowest. The SDK uses
// q/h/f (quarter, half, full resolution); numeric RIDs and low/mid/high work too.
func layerOf(rid string) int8 {
	switch strings.ToLower(rid) {
	case "f", "full", "high", "2":
		return 2
	case "h", "half", "mid", "medium", "m", "1":
		return 1
	}
	return 0
}

func newPublication(owner *Participant, info protocol.TrackInfo, kind Kind, codec Codec, src Source, cacheSize int) *Publication {
	info.MimeType = codec.MimeType
	info.SSRC = src.SSRC()
	t := &Publication{
		sid:       info.Sid,
		owner:     owner,
		kind:      kind,
		codec:     codec,
		ck:        codecOf(codec.MimeType),
		info:      info,
		cacheSize: cacheSize,
	}
	if t.kind == Audio {
		// Audio is rarely NACKed and its packets are small and frequent.
		t.cacheSize = 128
	}
	t.muted.Store(info.Muted)
	empty := []*DownTrack{}
	t.downs.Store(&empty)
	t.addLayer(src)
	return t
}

// addLayer adds a simulcast encoding; it returns nil if that layer exists.
func (t *Publication) addLayer(src Source) *layer {
	idx := layerOf(src.RID())
	t.layerMu.Lock()
	defer t.layerMu.Unlock()
	if t.layers[idx].Load() != nil {
		return nil
	}
	l := &layer{index: idx, pub: t, src: src, cache: NewPacketCache(t.cacheSize)}
	t.layers[idx].Store(l)
	if src.RID() != "" {
		t.infoMu.Lock()
		t.info.Simulcast = true
		t.infoMu.Unlock()
	}
	return l
}

func (t *Publication) layer(i int8) *layer {
	if i < 0 || i >= maxLayers {
		return nil
	}
	return t.layers[i].Load()
}

// layerIdle is how long a layer may send nothing and still count as active.
const layerIdle = time.Second

// activeLayers reports which layers exist and which have sent media in the
// last layerIdle.
func (t *Publication) activeLayers() (exists, active [maxLayers]bool) {
	n := now()
	for i := range t.layers {
		if l := t.layers[i].Load(); l != nil {
			exists[i] = true
			active[i] = n-l.lastRecv.Load() < int64(layerIdle)
		}
	}
	return exists, active
}

// layerForSize is the lowest layer at least as large as the size a subscriber
// shows the video at, by the layer sizes the publisher announced. Without sizes
// the top layer's size is assumed to halve per layer below it.
func (t *Publication) layerForSize(w, h int) int {
	info := t.Info()
	sizes := [maxLayers][2]int{}
	known := false
	for _, l := range info.Layers {
		i := layerOf(l.RID)
		sizes[i] = [2]int{l.Width, l.Height}
		known = known || l.Width > 0 || l.Height > 0
	}
	if !known {
		if info.Width == 0 && info.Height == 0 {
			return maxLayers - 1
		}
		for i := maxLayers - 1; i >= 0; i-- {
			div := 1 << (maxLayers - 1 - i)
			sizes[i] = [2]int{info.Width / div, info.Height / div}
		}
	}
	for i := 0; i < maxLayers; i++ {
		if (sizes[i][0] > 0 || sizes[i][1] > 0) && sizes[i][0] >= w && sizes[i][1] >= h {
			return i
		}
	}
	return maxLayers - 1
}

// Sid is the track's server id.
func (t *Publication) Sid() string { return t.sid }

// Info returns the track's description.
func (t *Publication) Info() protocol.TrackInfo {
	t.infoMu.Lock()
	defer t.infoMu.Unlock()
	i := t.info
	i.Muted = t.muted.Load()
	return i
}

// Kind is audio or video.
func (t *Publication) Kind() Kind { return t.kind }

func (t *Publication) addDown(d *DownTrack) {
	t.downMu.Lock()
	defer t.downMu.Unlock()
	old := *t.downs.Load()
	next := make([]*DownTrack, len(old), len(old)+1)
	copy(next, old)
	next = append(next, d)
	t.downs.Store(&next)
}

func (t *Publication) removeDown(d *DownTrack) {
	t.downMu.Lock()
	defer t.downMu.Unlock()
	old := *t.downs.Load()
	next := make([]*DownTrack, 0, len(old))
	for _, x := range old {
		if x != d {
			next = append(next, x)
		}
	}
	t.downs.Store(&next)
}

// Subscribers returns the current down tracks.
func (t *Publication) Subscribers() []*DownTrack { return *t.downs.Load() }

// forward reads one layer's packets until the track ends.
func (l *layer) forward() {
	t := l.pub
	buf := make([]byte, maxPacket)
	f := &forwarder{l: l}
	if n := min(runtime.GOMAXPROCS(0)-1, maxFanWorkers); n > 0 && t.kind == Video {
		f.workers = newFanWorkers(n)
	}
	defer f.end()
	if ps, ok := l.src.(pushSource); ok {
		f.src, f.pushFn = ps, f.push // one method value, not one per packet
	}
	for {
		n, err := l.src.ReadRTP(buf)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.owner.log.Debug("track read ended", "track", t.sid, "layer", l.index, "err", err)
			}
			return
		}
		f.mu.Lock()
		if n == 0 {
			l.replayWaiting() // woken (waker): a subscriber's transport came up
		} else {
			f.handle(buf[:n])
		}
		// The queue may be empty now: the source's goroutine can take over.
		if f.src != nil && !f.pushing && !f.wide() && f.src.PushTo(f.pushFn) {
			f.pushing = true
		}
		f.mu.Unlock()
	}
}

// forwarder is a layer's per-packet state. Its packets come one at a time:
// from the layer's reader goroutine, or, while a pushSource pushes, from the
// goroutine that received them; mu orders the two at each hand-over and
// keeps a push out once the layer ended.
type forwarder struct {
	l       *layer
	mu      sync.Mutex
	ended   bool
	pkt     Packet
	workers *fanWorkers
	fb      fanBatch
	// src pushes (pushing) while the fan-out is narrow; a wide one is left
	// to the layer's goroutine, so that the receiving goroutine (every
	// session's socket reader) goes on reading meanwhile.
	src     pushSource
	pushFn  func([]byte)
	pushing bool
	// Counters reach Prometheus in batches (flush).
	inPackets, inBytes, outPackets, outBytes, withheld int
	flushed                                            int64
}

// wide reports whether the fan-out is split between workers (parallelFanout).
func (f *forwarder) wide() bool { return len(*f.l.pub.downs.Load()) >= parallelFanout }

// push forwards one packet the source pushed; b is only read during the call.
func (f *forwarder) push(b []byte) {
	f.mu.Lock()
	if !f.ended {
		f.handle(b)
		if f.wide() && f.src.PushTo(nil) {
			f.pushing = false // the next packets queue for the layer's goroutine
		}
	}
	f.mu.Unlock()
}

// end stops the forwarding: pushes arriving after it are dropped.
func (f *forwarder) end() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ended = true
	f.flush()
	if f.workers != nil {
		f.workers.close()
	}
}

func (f *forwarder) flush() {
	f.flushed = now()
	metrics.PacketsIn.Add(float64(f.inPackets))
	metrics.BytesIn.Add(float64(f.inBytes))
	metrics.PacketsOut.Add(float64(f.outPackets))
	metrics.BytesOut.Add(float64(f.outBytes))
	if f.l.pub.kind == Audio {
		metrics.AudioForwarded.Add(float64(f.outPackets))
		metrics.AudioWithheld.Add(float64(f.withheld))
	}
	f.inPackets, f.inBytes, f.outPackets, f.outBytes, f.withheld = 0, 0, 0, 0, 0
}

func (f *forwarder) handle(b []byte) {
	l, t, pkt := f.l, f.l.pub, &f.pkt
	n := len(b)
	if !l.parse(pkt, b) {
		return
	}
	l.noteNewest(pkt)
	if pkt.Keyframe {
		l.lastKey.Store(pkt.Arrival)
		l.noteGOP(pkt)
	}
	// Padding alone (Chromium probes on the SSRC of an encoding it has
	// turned off) is not media: the layer is no more active for it.
	if len(pkt.Payload) > 0 {
		if prev := l.lastRecv.Swap(pkt.Arrival); prev == 0 || pkt.Arrival-prev >= int64(layerIdle) {
			// A layer that starts sending, or sends again after the
			// publisher turned it off, may be what subscribers should
			// get: its first packets are the keyframe a switch up
			// waits for.
			for _, d := range t.Subscribers() {
				d.chooseLayer()
			}
		}
	}
	t.packets.Add(1)
	t.bytes.Add(uint64(n))
	l.bytes.Add(uint64(n))
	f.inPackets++
	f.inBytes += n
	if t.muted.Load() {
		return
	}
	sent, held := t.deliver(pkt, f.workers, &f.fb)
	f.withheld += held
	f.outPackets += sent
	f.outBytes += sent * n
	// Every 128 packets, and at least every 250 ms so that slow tracks and
	// short windows read true.
	if f.inPackets >= 128 || pkt.Arrival-f.flushed > int64(250*time.Millisecond) {
		f.flush()
	}
}

// deliver hands pkt to the subscribers and the sinks and returns how many
// subscribers sent it, and how many audio Last-N withheld it from.
func (t *Publication) deliver(pkt *Packet, workers *fanWorkers, fb *fanBatch) (sent, withheld int) {
	if t.audioWithheld.Load() {
		// Not among the loudest speakers; sinks (a recording, other nodes)
		// still get it.
		withheld = len(*t.downs.Load())
	} else {
		sent = t.fanoutBatch(pkt, workers, fb)
	}
	t.sendSinks(pkt)
	return sent, withheld
}

// fanout hands pkt to every subscriber and returns how many sent it.
func (t *Publication) fanout(pkt *Packet) int {
	return sendAll(*t.downs.Load(), pkt, nil)
}

// sendAll writes pkt to downs; sessions' packets are queued in fb
// (nil: written one by one) and leave in one sendmmsg(2) per batch.
func sendAll(downs []*DownTrack, pkt *Packet, fb *fanBatch) int {
	sent := 0
	for _, d := range downs {
		if d.writeRTPBatch(pkt, fb) {
			sent++
		}
	}
	fb.flush()
	return sent
}

// A track with many subscribers is fanned out by several goroutines, so that one
// popular track is not limited to one core: above parallelFanout subscribers the
// list is cut into one share per worker, the reader takes the first share and
// waits for the others before reading the next packet (the packet stays valid in
// the cache slot until then).
const (
	parallelFanout = 64
	maxFanWorkers  = 4
)

type fanJob struct {
	pkt   *Packet
	downs []*DownTrack
}

type fanWorkers struct {
	jobs chan fanJob
	wg   sync.WaitGroup
	sent atomic.Int64
	n    int
}

func newFanWorkers(n int) *fanWorkers {
	w := &fanWorkers{jobs: make(chan fanJob, n), n: n}
	for i := 0; i < n; i++ {
		go func() {
			var fb fanBatch
			for j := range w.jobs {
				w.sent.Add(int64(sendAll(j.downs, j.pkt, &fb)))
				w.wg.Done()
			}
		}()
	}
	return w
}

func (w *fanWorkers) close() { close(w.jobs) }

// fanoutParallel is fanout with workers (nil workers: serial).
func (t *Publication) fanoutParallel(pkt *Packet, w *fanWorkers) int {
	return t.fanoutBatch(pkt, w, nil)
}

// fanoutBatch is fanoutParallel with the calling goroutine's batch.
func (t *Publication) fanoutBatch(pkt *Packet, w *fanWorkers, fb *fanBatch) int {
	downs := *t.downs.Load()
	if w == nil || len(downs) < parallelFanout {
		return sendAll(downs, pkt, fb)
	}
	shares := w.n + 1
	size := (len(downs) + shares - 1) / shares
	w.sent.Store(0)
	for i := size; i < len(downs); i += size {
		w.wg.Add(1)
		w.jobs <- fanJob{pkt: pkt, downs: downs[i:min(i+size, len(downs))]}
	}
	sent := sendAll(downs[:size], pkt, fb)
	w.wg.Wait()
	return sent + int(w.sent.Load())
}

// parse fills pkt from raw, storing raw in the cache. It rejects what is not RTP.
func (l *layer) parse(pkt *Packet, raw []byte) bool {
	payload, ok := splitRTP(&pkt.Header, raw)
	if !ok {
		return false
	}
	pkt.Arrival = now()
	stored := l.cache.Put(pkt.Header.SequenceNumber, raw, pkt.Arrival)
	if stored == nil {
		return false
	}
	// The same bytes in the cache slot, which outlives raw.
	start := len(raw) - len(payload) - int(pkt.Header.PaddingSize)
	pkt.Payload = stored[start : start+len(payload)]
	pkt.Layer = l.index
	pkt.Keyframe = l.pub.kind == Video && isKeyframe(l.pub.ck, pkt.Payload)
	pkt.VP8 = vp8Descriptor{}
	if l.pub.ck == codecVP8 {
		pkt.VP8 = parseVP8(pkt.Payload)
		if l.svc.ddExt != 0 {
			l.vp8DD(pkt)
		}
		if pkt.VP8.hasTID {
			l.trates.add(pkt.VP8.tid, len(raw))
		}
	}
	if (l.pub.ck == codecVP9 || l.pub.ck == codecAV1) && !l.parseSVC(pkt) {
		return false
	}
	if l.levelExt != 0 {
		if ext := pkt.Header.GetExtension(l.levelExt); len(ext) > 0 {
			l.speaker.Observe(ext[0]&0x7f, time.Now())
		}
	}
	return true
}

// readRTCP consumes the publisher's RTCP for a layer: sender reports give the
// clock mapping.
func (l *layer) readRTCP() {
	buf := make([]byte, maxPacket)
	ssrc := l.src.SSRC()
	for {
		n, err := l.src.ReadRTCP(buf)
		if err != nil {
			return
		}
		pkts, err := rtcp.Unmarshal(buf[:n])
		if err != nil {
			continue
		}
		for _, p := range pkts {
			if sr, ok := p.(*rtcp.SenderReport); ok && sr.SSRC == ssrc {
				l.srRTP.Store(sr.RTPTime)
				l.srAt.Store(now())
			}
		}
	}
}

// requestKeyframe asks the publisher for a keyframe on this layer unless one was
// asked for less than minKeyframeInterval ago: requests from many subscribers
// become one.
//
// A request inside the window is not lost: if the keyframe asked for has not
// arrived yet it will serve this requester too; if it has already gone by, a new
// request is sent when the window ends.
func (l *layer) requestKeyframe() {
	if l.pub.kind != Video {
		return
	}
	n := now()
	last := l.lastPLI.Load()
	if n < l.keyWait.Load() && l.lastKey.Load() < last {
		return
	}
	if wait := last + int64(minKeyframeInterval) - n; wait > 0 {
		if l.lastKey.Load() > last && l.deferred.CompareAndSwap(false, true) {
			time.AfterFunc(time.Duration(wait), func() {
				l.deferred.Store(false)
				l.requestKeyframe()
			})
		}
		return
	}
	if !l.lastPLI.CompareAndSwap(last, n) {
		return
	}
	metrics.PLIsOut.Inc()
	l.src.RequestKeyframe()
}

// RequestKeyframe asks for a keyframe on every layer some subscriber waits for.
func (t *Publication) RequestKeyframe() {
	for i := range t.layers {
		if l := t.layers[i].Load(); l != nil {
			l.requestKeyframe()
		}
	}
}

// setMuted records the mute state; unmuting asks for a keyframe so subscribers
// resume at once.
func (t *Publication) setMuted(m bool) {
	if t.muted.Swap(m) && !m {
		for _, d := range t.Subscribers() {
			d.resync()
		}
		for i := range t.layers {
			if l := t.layers[i].Load(); l != nil {
				l.lastPLI.Store(0)
			}
		}
		t.RequestKeyframe()
	}
}

// start runs a layer's readers; when the base layer ends, the track is over.
func (l *layer) start(onEnd func()) {
	go l.readRTCP()
	go func() {
		l.forward()
		if onEnd != nil {
			onEnd()
		}
	}()
}

// stop ends reading from the publisher.
func (t *Publication) stop() {
	for i := range t.layers {
		if l := t.layers[i].Load(); l != nil {
			l.src.Stop()
			return // one receiver carries every layer
		}
	}
}
