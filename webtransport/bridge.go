package webtransport

import (
	"strings"
	"sync"
	"time"

	"github.com/petrel-sfu/petrel/sfu"
	"github.com/petrel-sfu/petrel/webtransport/moqt"
)

// findPublication picks a participant's publication by MoQT track name: its
// sid, or video/audio/screen/screen_audio by kind and source.
func findPublication(pubs []*sfu.Publication, name string) *sfu.Publication {
	for _, p := range pubs {
		if p.Info().Sid == name {
			return p
		}
	}
	var want func(kind, source string) bool
	switch name {
	case "video":
		want = func(k, s string) bool { return k == "video" && s != "screen" }
	case "audio":
		want = func(k, s string) bool { return k == "audio" && s != "screen_audio" }
	case "screen":
		want = func(k, s string) bool { return k == "video" && s == "screen" }
	case "screen_audio":
		want = func(k, s string) bool { return k == "audio" && s == "screen_audio" }
	default:
		return nil
	}
	for _, p := range pubs {
		i := p.Info()
		if want(i.Kind, i.Source) {
			return p
		}
	}
	return nil
}

// webCodecsString names a publication's codec the way WebCodecs does.
func webCodecsString(mime, fmtp string) string {
	switch codecKind(mime) {
	case "vp8":
		return "vp8"
	case "opus":
		return "opus"
	case "h264":
		for _, kv := range strings.Split(fmtp, ";") {
			if k, v, ok := strings.Cut(strings.TrimSpace(kv), "="); ok && k == "profile-level-id" && len(v) == 6 {
				return "avc1." + strings.ToLower(v)
			}
		}
		return "avc1.42e01f"
	}
	return ""
}

// attachRTP subscribes d to a track of a room participant (a WebRTC publisher,
// a camera, another local participant) through a sink.
func (s *session) attachRTP(d *downSub, identity, track string) error {
	room := s.srv.opt.Manager.Room(s.room)
	if room == nil {
		return errNoTrack
	}
	p := room.ByIdentity(identity)
	if p == nil {
		return errNoTrack
	}
	pub := findPublication(p.Publications(), track)
	if pub == nil {
		return errNoTrack
	}
	c := pub.Codec()
	kind := codecKind(c.MimeType)
	if kind == "" {
		return errNoTrack
	}
	dp, _ := NewDepacketizer(kind, c.ClockRate)
	k := &rtpSink{d: d, pub: pub, kind: kind, codec: webCodecsString(c.MimeType, c.SDPFmtpLine), dp: dp, cur: -1,
		width: pub.Info().Width, height: pub.Info().Height}
	if kind == "opus" {
		d.perFrame, d.priority = true, 0
	}
	d.keyframe = k.requestKeyframe
	d.pubSid, d.ownerSid = pub.Info().Sid, p.Sid()
	remove := pub.AddSink(k)
	d.onStop = remove
	return nil
}

// rtpSink depacketizes one publication for one WebTransport subscriber. It runs
// on the publication's forwarding goroutine: it must not block.
type rtpSink struct {
	d     *downSub
	pub   *sfu.Publication
	kind  string
	codec string

	mu             sync.Mutex
	dp             *Depacketizer
	cur, best      int8 // the layer depacketized, the best layer seen
	bestSeen       time.Time
	group, obj     uint64
	started        bool
	lastUs, baseUs uint64
	lastKF         time.Time
	waitKey        bool // the depacketizer lost sync: ask until a keyframe comes
	width, height  int
}

// keyframeRetry is how often a subscriber that waits for a keyframe asks again.
const keyframeRetry = 300 * time.Millisecond

func (k *rtpSink) requestKeyframe() {
	k.mu.Lock()
	now := time.Now()
	if now.Sub(k.lastKF) < keyframeRetry {
		k.mu.Unlock()
		return
	}
	k.lastKF = now
	layer := k.cur
	if k.best > k.cur {
		layer = k.best
	}
	k.mu.Unlock()
	if layer > 0 {
		k.pub.RequestLayerKeyframe(layer)
	} else {
		k.pub.RequestKeyframe()
	}
}

// WriteRTP implements sfu.Sink. With simulcast the sink follows the best layer
// it sees: it starts on the first keyframe of any layer and moves up at a
// keyframe of a better one (asking for it), down when the current one stops.
func (k *rtpSink) WriteRTP(pkt *sfu.Packet) {
	k.mu.Lock()
	now := time.Now()
	if pkt.Layer >= k.best || now.Sub(k.bestSeen) > time.Second {
		if pkt.Layer != k.best {
			k.best = pkt.Layer
		}
		k.bestSeen = now
	}
	if pkt.Layer != k.cur {
		switchTo := k.cur < 0 || pkt.Layer == k.best
		if !switchTo || !pkt.Keyframe {
			want := switchTo && now.Sub(k.lastKF) > 500*time.Millisecond
			k.mu.Unlock()
			if want {
				go k.requestKeyframe() // not on the forwarding goroutine
			}
			return
		}
		// Start or switch on this layer's keyframe; keep media time continuous.
		k.cur = pkt.Layer
		k.dp, _ = NewDepacketizer(k.kind, k.pub.Codec().ClockRate)
		if k.started {
			k.baseUs = k.lastUs + 1
		}
	}
	k.dp.Push(&pkt.Header, pkt.Payload, pkt.Keyframe, k.emit)
	if k.dp.NeedKeyframe() {
		k.waitKey = true
	}
	// Until a keyframe comes, ask again each keyframeRetry: a request inside
	// requestKeyframe's window is dropped, and a WebRTC publisher sends no
	// keyframe unless asked, so one lost request would stall for good.
	ask := k.waitKey && now.Sub(k.lastKF) >= keyframeRetry
	k.mu.Unlock()
	if ask {
		go k.requestKeyframe() // not on the forwarding goroutine
	}
}

// emit is called with k.mu held.
func (k *rtpSink) emit(tsUs uint64, key bool, frame []byte) {
	ts := k.baseUs + tsUs
	k.lastUs = ts
	if k.kind == "opus" || !k.started || key {
		if k.started {
			k.group++
		}
		k.obj = 0
	} else {
		k.obj++
	}
	k.started = true
	if key {
		k.waitKey = false
	}
	m := moqt.Meta{TimestampUs: ts, Keyframe: key || k.kind == "opus", WallclockMs: uint64(time.Now().UnixMilli()), AudioLevel: -1}
	if key || k.kind == "opus" {
		m.Codec = k.codec
		if key {
			m.Width, m.Height = k.width, k.height
		}
	}
	ext := moqt.AppendExtensions(nil, &m)
	_, l, _ := moqt.ParseVI(ext)
	k.d.enqueue(outObj{group: k.group, obj: k.obj, ext: ext[l:], payload: append([]byte(nil), frame...)})
}
