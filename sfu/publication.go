package sfu

import (
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/rtcp"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/metrics"
	"github.com/petrel-sfu/petrel/protocol"
)

// Publication is one track a participant publishes. Its reader goroutine is the
// start of the packet path: read from the publisher's connection, store in the
// packet cache, hand the same parsed packet to every subscriber's DownTrack.
//
// The subscriber list is an immutable slice swapped atomically (copy on write), so
// the per-packet loop takes no lock shared with the room or other tracks.
type Publication struct {
	sid   string
	owner *Participant
	kind  webrtc.RTPCodecType
	codec webrtc.RTPCodecParameters
	ck    codecKind

	remote   *webrtc.TrackRemote
	receiver *webrtc.RTPReceiver
	cache    *PacketCache

	infoMu sync.Mutex
	info   protocol.TrackInfo

	downMu sync.Mutex
	downs  atomic.Pointer[[]*DownTrack]

	muted   atomic.Bool
	lastPLI atomic.Int64 // monotonic ns of the last keyframe request sent upstream

	// Publisher's clock mapping from its last sender report: the RTP time srRTP was
	// current at local monotonic time srAt. Sender reports to subscribers derive from it.
	srRTP atomic.Uint32
	srAt  atomic.Int64

	packets atomic.Uint64
	bytes   atomic.Uint64

	done chan struct{}
}

// minKeyframeInterval aggregates keyframe requests: every subscriber asking within
// this window is served by the same keyframe.
const minKeyframeInterval = 300 * time.Millisecond

var epoch = time.Now()

// now is a monotonic clock in nanoseconds, cheap enough for the packet path.
func now() int64 { return int64(time.Since(epoch)) }

func newPublication(owner *Participant, info protocol.TrackInfo, remote *webrtc.TrackRemote, receiver *webrtc.RTPReceiver, cacheSize int) *Publication {
	codec := remote.Codec()
	info.MimeType = codec.MimeType
	info.SSRC = uint32(remote.SSRC())
	t := &Publication{
		sid:      info.Sid,
		owner:    owner,
		kind:     remote.Kind(),
		codec:    codec,
		ck:       codecOf(codec.MimeType),
		remote:   remote,
		receiver: receiver,
		info:     info,
		done:     make(chan struct{}),
	}
	if t.kind == webrtc.RTPCodecTypeAudio {
		// Audio is rarely NACKed and its packets are small and frequent.
		cacheSize = 128
	}
	t.cache = NewPacketCache(cacheSize)
	t.muted.Store(info.Muted)
	empty := []*DownTrack{}
	t.downs.Store(&empty)
	return t
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
func (t *Publication) Kind() webrtc.RTPCodecType { return t.kind }

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

// forward reads the publisher's packets until the track ends.
func (t *Publication) forward() {
	defer close(t.done)
	buf := make([]byte, maxPacket)
	var pkt Packet
	var inPackets, inBytes, outPackets, outBytes int
	flush := func() {
		metrics.PacketsIn.Add(float64(inPackets))
		metrics.BytesIn.Add(float64(inBytes))
		metrics.PacketsOut.Add(float64(outPackets))
		metrics.BytesOut.Add(float64(outBytes))
		inPackets, inBytes, outPackets, outBytes = 0, 0, 0, 0
	}
	defer flush()
	for {
		n, _, err := t.remote.Read(buf)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.owner.log.Debug("track read ended", "track", t.sid, "err", err)
			}
			return
		}
		if !t.parse(&pkt, buf[:n]) {
			continue
		}
		t.packets.Add(1)
		t.bytes.Add(uint64(n))
		inPackets++
		inBytes += n
		if t.muted.Load() {
			continue
		}
		sent := t.fanout(&pkt)
		outPackets += sent
		outBytes += sent * n
		if inPackets >= 128 {
			flush()
		}
	}
}

// fanout hands pkt to every subscriber and returns how many sent it.
func (t *Publication) fanout(pkt *Packet) int {
	sent := 0
	for _, d := range *t.downs.Load() {
		if d.writeRTP(pkt) {
			sent++
		}
	}
	return sent
}

// parse fills pkt from raw, storing raw in the cache. It rejects what is not RTP.
func (t *Publication) parse(pkt *Packet, raw []byte) bool {
	hn, err := pkt.Header.Unmarshal(raw)
	if err != nil {
		return false
	}
	stored := t.cache.Put(pkt.Header.SequenceNumber, raw)
	if stored == nil {
		return false
	}
	end := len(stored)
	pkt.Header.PaddingSize = 0
	if pkt.Header.Padding {
		pad := int(stored[end-1])
		if pad == 0 || hn+pad > end {
			return false
		}
		end -= pad
		pkt.Header.PaddingSize = byte(pad)
	}
	pkt.Payload = stored[hn:end]
	pkt.Keyframe = t.kind == webrtc.RTPCodecTypeVideo && isKeyframe(t.ck, pkt.Payload)
	pkt.Arrival = now()
	return true
}

// readRTCP consumes the publisher's RTCP: sender reports give the clock mapping.
func (t *Publication) readRTCP() {
	buf := make([]byte, maxPacket)
	for {
		n, _, err := t.receiver.Read(buf)
		if err != nil {
			return
		}
		pkts, err := rtcp.Unmarshal(buf[:n])
		if err != nil {
			continue
		}
		for _, p := range pkts {
			if sr, ok := p.(*rtcp.SenderReport); ok && sr.SSRC == uint32(t.remote.SSRC()) {
				t.srRTP.Store(sr.RTPTime)
				t.srAt.Store(now())
			}
		}
	}
}

// RequestKeyframe asks the publisher for a keyframe unless one was asked for less
// than minKeyframeInterval ago: requests from many subscribers become one.
func (t *Publication) RequestKeyframe() {
	if t.kind != webrtc.RTPCodecTypeVideo {
		return
	}
	n := now()
	last := t.lastPLI.Load()
	if n-last < int64(minKeyframeInterval) || !t.lastPLI.CompareAndSwap(last, n) {
		return
	}
	metrics.PLIsOut.Inc()
	t.owner.writeRTCP([]rtcp.Packet{&rtcp.PictureLossIndication{MediaSSRC: uint32(t.remote.SSRC())}})
}

// setMuted records the mute state; unmuting asks for a keyframe so subscribers
// resume at once.
func (t *Publication) setMuted(m bool) {
	if t.muted.Swap(m) && !m {
		for _, d := range t.Subscribers() {
			d.resync()
		}
		t.lastPLI.Store(0)
		t.RequestKeyframe()
	}
}
