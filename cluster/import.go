package cluster

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/sfu"
)

// importer makes the peer's participants appear in this node's rooms as local
// participants (mirrors) whose tracks are fed from the link.
type importer struct {
	l *Link

	mu      sync.RWMutex
	mirrors map[string]*mirror // room + "\x00" + identity
	tracks  map[uint32]*mirrorTrack
}

// mirror is one remote participant. p is nil while a participant with the same
// identity is on this node (it moved here, or another node's mirror of it
// came first); the mirror materializes when that one leaves.
type mirror struct {
	room, identity, name, meta string
	grants                     auth.Grants // the mirrored participant's
	p                          *sfu.Participant
	// joining: a materialize runs (the control reader's and the sync loop's
	// must not both join, or the second would push the first out).
	joining bool
	tracks  map[uint32]*mirrorTrack
}

// mirrorTrack is one remote track: a local track per simulcast layer.
type mirrorTrack struct {
	n      uint32
	m      *mirror
	msg    ctlMsg // the announcement, replayed when the mirror materializes
	layers [3]*sfu.LocalTrack
	pub    *sfu.Publication
	// lastSeq per layer (seq+1, 0: none yet) for gap detection; touched only by
	// the media goroutine.
	lastSeq [3]uint32
	want    atomic.Uint32 // last demand sent
}

func newImporter(l *Link) *importer {
	return &importer{l: l, mirrors: map[string]*mirror{}, tracks: map[uint32]*mirrorTrack{}}
}

func (im *importer) onCtl(m *ctlMsg) {
	switch m.T {
	case msgPart:
		if m.Room == "" || m.ID == "" || len(m.Room) > 128 || len(m.ID) > 256 {
			im.l.stats.malformed.Add(1)
			return
		}
		key := m.Room + "\x00" + m.ID
		im.mu.Lock()
		mr := im.mirrors[key]
		if mr == nil {
			// A peer that sends no grants gets what carrying media and data
			// needs, nothing more.
			g := auth.Grants{Publish: true, PublishData: true}
			if m.Grants != nil {
				g = *m.Grants
			}
			mr = &mirror{room: m.Room, identity: m.ID, name: m.Name, meta: m.Meta, grants: g, tracks: map[uint32]*mirrorTrack{}}
			im.mirrors[key] = mr
		}
		im.mu.Unlock()
		im.materialize(mr)
	case msgLeave:
		key := m.Room + "\x00" + m.ID
		im.mu.Lock()
		mr := im.mirrors[key]
		delete(im.mirrors, key)
		if mr != nil {
			for n := range mr.tracks {
				delete(im.tracks, n)
			}
		}
		im.mu.Unlock()
		if mr != nil {
			im.dematerialize(mr, "left")
		}
	case msgPub:
		if m.Info == nil || m.Codec == nil || m.N == 0 {
			im.l.stats.malformed.Add(1)
			return
		}
		im.mu.Lock()
		mr := im.mirrors[m.Room+"\x00"+m.ID]
		if mr == nil {
			im.mu.Unlock()
			return
		}
		mt := &mirrorTrack{n: m.N, m: mr, msg: *m}
		mr.tracks[m.N] = mt
		im.tracks[m.N] = mt
		p := mr.p
		im.mu.Unlock()
		if p != nil {
			im.publish(p, mt)
		}
	case msgUnpub:
		im.mu.Lock()
		mt := im.tracks[m.N]
		delete(im.tracks, m.N)
		if mt != nil {
			delete(mt.m.tracks, m.N)
		}
		im.mu.Unlock()
		if mt != nil {
			mt.close()
		}
	case msgMute:
		im.mu.RLock()
		mt := im.tracks[m.N]
		var p *sfu.Participant
		var pub *sfu.Publication
		if mt != nil {
			p, pub = mt.m.p, mt.pub
		}
		im.mu.RUnlock()
		if p != nil && pub != nil {
			_ = p.MuteTrack(pub.Sid(), m.Muted)
		}
	case msgData:
		im.mu.RLock()
		mr := im.mirrors[m.Room+"\x00"+m.ID]
		var p *sfu.Participant
		if mr != nil {
			p = mr.p
		}
		im.mu.RUnlock()
		if p != nil && len(m.To) <= 256 {
			p.PublishData(m.Reliable, m.Topic, m.To, m.Payload)
		}
	}
}

// materialize joins the mirror to its room unless the identity is there.
func (im *importer) materialize(mr *mirror) {
	n := im.l.node
	im.mu.Lock()
	if mr.p != nil || mr.joining || im.mirrors[mr.room+"\x00"+mr.identity] != mr {
		im.mu.Unlock()
		return
	}
	mr.joining = true
	im.mu.Unlock()
	defer func() {
		im.mu.Lock()
		mr.joining = false
		im.mu.Unlock()
	}()
	keep := false
	if r := n.mgr.Room(mr.room); r != nil {
		if q := r.ByIdentity(mr.identity); q != nil {
			// Someone holds the identity: the same person on this node, or a
			// mirror from another node. A mirror from a draining node gives
			// way at once (make before break: the person has moved), any
			// other holder is kept and this mirror waits for it to leave.
			from, ok := n.mirrorPeer(q)
			switch {
			case !ok && (n.draining.Load() || n.moving(q)):
				// The person is moving off this node (it drains, or the
				// room was re-placed): its new session comes in beside the
				// old one, so that those still here get its media before
				// the old one leaves (clients take a second session of an
				// identity for its successor).
				keep = true
			case !ok || from == im.l.peer || !n.isDraining(from):
				return
			default:
				q.Close("moved")
			}
		}
	}
	p, err := n.mgr.JoinLocal(sfu.LocalOptions{Room: mr.room, Identity: mr.identity, Name: mr.name, Metadata: mr.meta, KeepIdentity: keep,
		Grants: mr.grants, Origin: sfu.Mirror})
	if err != nil {
		im.l.log.Warn("mirror join failed", "room", mr.room, "identity", mr.identity, "err", err)
		return
	}
	n.addMirror(p, im.l.peer)
	im.mu.Lock()
	mr.p = p
	tracks := make([]*mirrorTrack, 0, len(mr.tracks))
	for _, mt := range mr.tracks {
		tracks = append(tracks, mt)
	}
	im.mu.Unlock()
	// Registered after mr.p is set: a mirror closed already (OnClose runs at
	// once) must not stay behind as mr.p, or sync would never join it again.
	p.OnClose(func() {
		n.removeMirror(p)
		im.mu.Lock()
		if mr.p == p {
			mr.p = nil
			for _, mt := range mr.tracks {
				mt.layers = [3]*sfu.LocalTrack{}
				mt.pub = nil
			}
		}
		im.mu.Unlock()
	})
	for _, mt := range tracks {
		im.publish(p, mt)
	}
}

func (im *importer) dematerialize(mr *mirror, why string) {
	im.mu.Lock()
	p := mr.p
	mr.p = nil
	im.mu.Unlock()
	if p != nil {
		p.Close(why)
	}
}

// publish creates the local tracks of a remote track, one per layer.
func (im *importer) publish(p *sfu.Participant, mt *mirrorTrack) {
	m := &mt.msg
	info := *m.Info
	info.Sid, info.Cid = "", ""
	base, err := p.PublishLocal(sfu.LocalTrackOptions{Info: info, Codec: m.Codec.params(), AudioLevelExt: m.ALevel})
	if err != nil {
		if !errors.Is(err, sfu.ErrLocalTrackClosed) {
			im.l.log.Warn("mirror track failed", "identity", m.ID, "err", err)
		}
		return
	}
	var layers [3]*sfu.LocalTrack
	layers[0] = base
	for _, i := range m.Layers {
		if i <= 0 || i > 2 || layers[i] != nil {
			continue
		}
		rid := [3]string{"q", "h", "f"}[i]
		lt, err := base.AddLayer(rid, info.SSRC+uint32(i))
		if err != nil {
			im.l.log.Warn("mirror layer failed", "identity", m.ID, "layer", i, "err", err)
			continue
		}
		layers[i] = lt
	}
	n, l := mt.n, im.l
	for i, lt := range layers {
		if lt == nil {
			continue
		}
		layer := int8(i)
		lt.OnKeyframeRequest(func() { l.send(ctlMsg{T: msgPLI, N: n, L: layer}) })
	}
	im.mu.Lock()
	mt.layers = layers
	mt.pub = base.Publication()
	mt.lastSeq = [3]uint32{}
	mt.want.Store(0)
	im.mu.Unlock()
}

func (mt *mirrorTrack) close() {
	if mt.layers[0] != nil {
		mt.layers[0].Close()
	}
}

// onMedia feeds one frame to its mirror track (the link's SCTP goroutine).
func (im *importer) onMedia(b []byte) {
	kind, n, layer, raw, err := parseMediaHeader(b)
	if err != nil || (kind != frameRTP && kind != frameRTX) {
		im.l.stats.malformed.Add(1)
		return
	}
	im.mu.RLock()
	mt := im.tracks[n]
	var lt *sfu.LocalTrack
	if mt != nil {
		lt = mt.layers[layer]
	}
	im.mu.RUnlock()
	if lt == nil {
		return
	}
	im.l.stats.recvPackets.Add(1)
	im.l.stats.recvBytes.Add(uint64(len(b)))
	if kind == frameRTP {
		im.detectLoss(mt, layer, uint16(raw[2])<<8|uint16(raw[3]))
	}
	_ = lt.WriteRTP(raw)
}

// detectLoss asks the peer for packets skipped over by a jump in sequence
// numbers (the media channel does not retransmit; the sender's cache does).
func (im *importer) detectLoss(mt *mirrorTrack, layer int8, seq uint16) {
	last := mt.lastSeq[layer]
	mt.lastSeq[layer] = uint32(seq) + 1
	if last == 0 {
		return
	}
	gap := seq - uint16(last) // packets missing between last and seq
	if gap == 0 || gap > 32 {
		return // in order, or a jump too large to repair (a layer switched back on)
	}
	seqs := make([]uint16, 0, gap)
	for s := uint16(last); s != seq; s++ {
		seqs = append(seqs, s)
	}
	im.l.send(ctlMsg{T: msgNack, N: mt.n, L: layer, Seqs: seqs})
}

// sync retries mirrors waiting for their identity to be free and tells the
// peer what this node's receivers need of each track.
func (im *importer) sync() {
	im.mu.RLock()
	var waiting []*mirror
	for _, mr := range im.mirrors {
		if mr.p == nil {
			waiting = append(waiting, mr)
		}
	}
	type want struct {
		mt  *mirrorTrack
		pub *sfu.Publication
	}
	var wants []want
	for _, mt := range im.tracks {
		wants = append(wants, want{mt, mt.pub})
	}
	im.mu.RUnlock()
	for _, mr := range waiting {
		im.materialize(mr)
	}
	for _, w := range wants {
		var mask uint32
		if w.pub != nil {
			mask = maskOf(w.pub.Demand())
		}
		// Sent on change, and re-sent now and then (cheap) in case one was lost.
		if w.mt.want.Swap(mask|1<<31) != mask|1<<31 {
			im.l.send(ctlMsg{T: msgWant, N: w.mt.n, Mask: mask})
		}
	}
}

func (im *importer) closeAll() {
	im.mu.Lock()
	ms := im.mirrors
	im.mirrors = map[string]*mirror{}
	im.tracks = map[uint32]*mirrorTrack{}
	im.mu.Unlock()
	for _, mr := range ms {
		im.dematerialize(mr, "node_link_lost")
	}
}
