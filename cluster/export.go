package cluster

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/petrel-sfu/petrel/sfu"
)

// exporter sends the peer this node's participants in the rooms both host, and
// of their tracks only the layers the peer's receivers asked for (msgWant).
type exporter struct {
	l *Link

	peerRooms atomic.Pointer[map[string]bool]

	mu    sync.Mutex
	parts map[*sfu.Participant]string // exported participant -> room
	pubs  map[*sfu.Publication]*export
	byN   map[uint32]*export
	nextN uint32
}

// export is one track sent over the link: a sink on the publication.
type export struct {
	l      *Link
	n      uint32
	pub    *sfu.Publication
	owner  *sfu.Participant
	video  bool
	all    bool          // cluster.forward_all: the benchmark baseline
	muted  bool          // as last told to the peer (sync goroutine only)
	mask   atomic.Uint32 // what the peer wants (maskOf)
	remove func()
	// Per layer: the frame buffer (each layer has its own reader goroutine)
	// and when each sequence number was last sent, for the nack rule.
	bufs  [3][]byte
	sent  [3]*sendTimes
	rtxMu sync.Mutex
	rtx   []byte
}

// sendTimes remembers when recent packets of a layer went out.
type sendTimes struct {
	seq [1024]atomic.Uint32 // seq+1, 0: empty
	at  [1024]atomic.Int64
}

func newExporter(l *Link) *exporter {
	e := &exporter{l: l, parts: map[*sfu.Participant]string{}, pubs: map[*sfu.Publication]*export{}, byN: map[uint32]*export{}}
	empty := map[string]bool{}
	e.peerRooms.Store(&empty)
	return e
}

func (e *exporter) setPeerRooms(rooms []string) {
	m := make(map[string]bool, len(rooms))
	for _, r := range rooms {
		if len(r) <= 128 {
			m[r] = true
		}
	}
	e.peerRooms.Store(&m)
}

// sync announces participants and tracks that appeared in the shared rooms and
// withdraws those that went.
func (e *exporter) sync(local []string) {
	peer := *e.peerRooms.Load()
	seenParts := map[*sfu.Participant]bool{}
	seenPubs := map[*sfu.Publication]bool{}
	mgr := e.l.node.mgr
	for _, name := range local {
		if !peer[name] {
			continue
		}
		room := mgr.Room(name)
		if room == nil {
			continue
		}
		for _, p := range room.Participants() {
			if e.l.node.isMirror(p) {
				continue
			}
			seenParts[p] = true
			e.mu.Lock()
			_, known := e.parts[p]
			if !known {
				e.parts[p] = name
			}
			e.mu.Unlock()
			if !known {
				info := p.Info()
				g := p.Grants()
				e.l.send(ctlMsg{T: msgPart, Room: name, ID: p.Identity(), Name: info.Name, Meta: info.Metadata, Grants: &g})
			}
			for _, t := range p.Publications() {
				seenPubs[t] = true
				e.mu.Lock()
				x, known := e.pubs[t]
				e.mu.Unlock()
				if !known {
					e.add(name, p, t)
				} else if m := t.Info().Muted; m != x.muted {
					x.muted = m
					e.l.send(ctlMsg{T: msgMute, N: x.n, Muted: m})
				}
			}
		}
	}
	e.mu.Lock()
	var gonePubs []*export
	for t, x := range e.pubs {
		if !seenPubs[t] {
			gonePubs = append(gonePubs, x)
			delete(e.pubs, t)
			delete(e.byN, x.n)
		}
	}
	var goneParts []*sfu.Participant
	var goneRooms []string
	for p, room := range e.parts {
		if !seenParts[p] {
			goneParts = append(goneParts, p)
			goneRooms = append(goneRooms, room)
			delete(e.parts, p)
		}
	}
	e.mu.Unlock()
	for _, x := range gonePubs {
		x.remove()
		e.l.send(ctlMsg{T: msgUnpub, N: x.n})
	}
	for i, p := range goneParts {
		e.l.send(ctlMsg{T: msgLeave, Room: goneRooms[i], ID: p.Identity()})
	}
}

func (e *exporter) add(room string, p *sfu.Participant, t *sfu.Publication) {
	e.mu.Lock()
	e.nextN++
	x := &export{l: e.l, n: e.nextN, pub: t, owner: p, video: t.Kind() == sfu.Video,
		all: e.l.node.cfg.ForwardAll, rtx: make([]byte, 1600)}
	for i := range x.bufs {
		x.bufs[i] = make([]byte, 1600)
		x.sent[i] = &sendTimes{}
	}
	e.pubs[t] = x
	e.byN[x.n] = x
	e.mu.Unlock()
	exists := t.Layers()
	var layers []int8
	for i, ok := range exists {
		if ok {
			layers = append(layers, int8(i))
		}
	}
	info := t.Info()
	x.muted = info.Muted
	// The announcement precedes the first packet on the same ordered channel
	// as the demand that will turn packets on.
	e.l.send(ctlMsg{T: msgPub, Room: room, ID: p.Identity(), N: x.n, Info: &info, Codec: codecToJSON(t.Codec()), Layers: layers, ALevel: t.AudioLevelExt()})
	x.remove = t.AddSink(x)
}

// onRequest handles what the peer asks of an exported track.
func (e *exporter) onRequest(m *ctlMsg) {
	e.mu.Lock()
	x := e.byN[m.N]
	e.mu.Unlock()
	if x == nil {
		return
	}
	switch m.T {
	case msgWant:
		old := x.mask.Swap(m.Mask)
		if x.video {
			// Layers switched on need a keyframe to be usable at the peer.
			for i := int8(0); i < 3; i++ {
				if m.Mask&(1<<i) != 0 && old&(1<<i) == 0 && m.Mask&(1<<8) != 0 {
					x.pub.RequestLayerKeyframe(i)
				}
			}
		}
	case msgPLI:
		if m.L >= 0 && m.L < 3 {
			x.pub.RequestLayerKeyframe(m.L)
		}
	case msgNack:
		if m.L >= 0 && m.L < 3 && len(m.Seqs) <= 64 {
			x.retransmit(m.L, m.Seqs)
		}
	}
}

// Demand is what the peer's receivers need (sfu.DemandSink): the publisher is
// asked for these layers on the peer's behalf.
func (x *export) Demand() (layers [3]bool, active bool) {
	m := x.mask.Load()
	if x.all {
		m = 1<<8 | 7
	}
	for i := range layers {
		layers[i] = m&(1<<i) != 0
	}
	return layers, m&(1<<8) != 0
}

// WriteRTP runs on the publication's forwarding goroutine for every layer's
// packets: it sends only the layers the peer wants.
func (x *export) WriteRTP(pkt *sfu.Packet) {
	m := x.mask.Load()
	if x.all {
		m = 1<<8 | 7
	}
	if m&(1<<8) == 0 || m&(1<<uint(pkt.Layer)) == 0 {
		x.l.stats.filtered.Add(1)
		return
	}
	buf := x.bufs[pkt.Layer]
	h := pkt.Header
	// The payload handed to sinks excludes padding; so does the frame.
	h.Padding, h.PaddingSize = false, 0
	n, err := h.MarshalTo(buf[mediaHeader:])
	if err != nil || mediaHeader+n+len(pkt.Payload) > len(buf) {
		return
	}
	putMediaHeader(buf, frameRTP, x.n, pkt.Layer)
	n += copy(buf[mediaHeader+n:], pkt.Payload)
	st := x.sent[pkt.Layer]
	i := pkt.Header.SequenceNumber & 1023
	st.seq[i].Store(uint32(pkt.Header.SequenceNumber) + 1)
	st.at[i].Store(time.Now().UnixNano())
	if x.l.sendMedia(buf[:mediaHeader+n]) {
		x.l.stats.sentPackets.Add(1)
		x.l.stats.sentBytes.Add(uint64(mediaHeader + n))
		x.l.stats.sentLayer[pkt.Layer].Add(1)
	}
}

// retransmit answers a nack from the publication's packet cache, hop by hop.
// A request that arrives less than one link RTT after the packet was last sent
// is ignored: that packet (or its retransmission) may still be on its way.
func (x *export) retransmit(layer int8, seqs []uint16) {
	rtt := x.l.RTT()
	if rtt == 0 {
		rtt = 20 * time.Millisecond
	}
	now := time.Now().UnixNano()
	x.rtxMu.Lock()
	defer x.rtxMu.Unlock()
	st := x.sent[layer]
	for _, seq := range seqs {
		i := seq & 1023
		if st.seq[i].Load() == uint32(seq)+1 && now-st.at[i].Load() < int64(rtt) {
			x.l.stats.nackIgnored.Add(1)
			continue
		}
		n := x.pub.CachedPacket(layer, seq, x.rtx[mediaHeader:])
		if n == 0 {
			x.l.stats.nackMissed.Add(1)
			continue
		}
		putMediaHeader(x.rtx, frameRTX, x.n, layer)
		st.at[i].Store(now)
		if x.l.sendMedia(x.rtx[:mediaHeader+n]) {
			x.l.stats.rtxSent.Add(1)
		}
	}
}

func (e *exporter) closeAll() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for t, x := range e.pubs {
		x.remove()
		delete(e.pubs, t)
	}
	e.byN = map[uint32]*export{}
	e.parts = map[*sfu.Participant]string{}
}
