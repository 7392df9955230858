package cluster

import (
	"encoding/json"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/webrtc/v4"
)

// Link is this node's connection to one other node: one PeerConnection (ICE,
// DTLS, SCTP) carrying every room the two share. Each side exports its own
// participants to the other (export.go) and mirrors the other's (import.go).
type Link struct {
	node *Node
	peer string
	// peerStarted is the peer's start time: a node restarted under the same id
	// (faster than its record expires) gets a new link, not the dead one.
	peerStarted int64
	pc          *webrtc.PeerConnection
	log         *slog.Logger

	// The two channels, set by attach as they arrive (each on its own
	// goroutine) and read by the channels' open handlers and the senders.
	ctl, media atomic.Pointer[webrtc.DataChannel]
	up         chan struct{} // closed when both channels are open
	upOnce     sync.Once
	closed     chan struct{}
	closeOnce  sync.Once
	sendq      chan []byte // control messages, written by one goroutine in order

	rtt atomic.Int64 // ns, smoothed; 0 before the first pong

	ex *exporter
	im *importer

	stats linkStats
}

type linkStats struct {
	sentPackets, sentBytes, recvPackets, recvBytes atomic.Uint64
	sentLayer                                      [3]atomic.Uint64
	filtered, rtxSent, nackIgnored, nackMissed     atomic.Uint64
	dropped, malformed                             atomic.Uint64
}

// maxMediaBuffered is how much may wait in the media channel before packets
// are dropped rather than queued (late video is worse than lost video: NACK
// and keyframe requests repair the loss).
const maxMediaBuffered = 1 << 20

func newLink(n *Node, peer string, pc *webrtc.PeerConnection) *Link {
	l := &Link{node: n, peer: peer, pc: pc, up: make(chan struct{}), closed: make(chan struct{}),
		sendq: make(chan []byte, 1024), log: n.log.With("link", peer)}
	l.ex = newExporter(l)
	l.im = newImporter(l)
	pc.OnConnectionStateChange(func(s webrtc.PeerConnectionState) {
		l.log.Debug("link state", "state", s.String())
		if s == webrtc.PeerConnectionStateFailed || s == webrtc.PeerConnectionStateClosed {
			l.close("connection " + s.String())
		}
	})
	return l
}

// attach takes a data channel of the link, created by either side. The
// engine detaches data channels (rtc.Engine): the link reads them itself.
func (l *Link) attach(dc *webrtc.DataChannel) {
	var onMsg func([]byte)
	size := 2048
	switch dc.Label() {
	case "ctl":
		l.ctl.Store(dc)
		onMsg = l.onCtl
		size = maxCtlMsg
	case "media":
		l.media.Store(dc)
		onMsg = l.im.onMedia
	default:
		l.log.Warn("link: unknown data channel", "label", dc.Label())
		return
	}
	dc.OnOpen(func() {
		rw, err := dc.Detach()
		if err != nil {
			l.close("detach: " + err.Error())
			return
		}
		go func() {
			buf := make([]byte, size)
			for {
				n, err := rw.Read(buf)
				if err != nil {
					l.close("channel " + dc.Label() + ": " + err.Error())
					return
				}
				onMsg(buf[:n])
			}
		}()
		if c, m := l.ctl.Load(), l.media.Load(); c != nil && m != nil && c.ReadyState() == webrtc.DataChannelStateOpen &&
			m.ReadyState() == webrtc.DataChannelStateOpen {
			l.upOnce.Do(func() {
				close(l.up)
				l.log.Info("node link up")
				go l.writeLoop()
				go l.syncLoop()
			})
		}
	})
}

func (l *Link) isUp() bool {
	select {
	case <-l.up:
		select {
		case <-l.closed:
			return false
		default:
			return true
		}
	default:
		return false
	}
}

// send queues a control message; a full queue (a stuck link) drops it, and the
// periodic sync repeats what matters (rooms, demand).
func (l *Link) send(m ctlMsg) {
	b, err := json.Marshal(m)
	if err != nil {
		return
	}
	select {
	case l.sendq <- b:
	case <-l.closed:
	default:
		l.stats.dropped.Add(1)
	}
}

func (l *Link) writeLoop() {
	for {
		select {
		case <-l.closed:
			return
		case b := <-l.sendq:
			if err := l.ctl.Load().SendText(string(b)); err != nil {
				l.close("ctl send: " + err.Error())
				return
			}
		}
	}
}

// sendMedia writes one media frame; it never blocks.
func (l *Link) sendMedia(b []byte) bool {
	m := l.media.Load()
	if m == nil || m.BufferedAmount() > maxMediaBuffered {
		l.stats.dropped.Add(1)
		return false
	}
	if err := m.Send(b); err != nil {
		l.stats.dropped.Add(1)
		return false
	}
	return true
}

func (l *Link) onCtl(b []byte) {
	if len(b) > maxCtlMsg {
		l.stats.malformed.Add(1)
		return
	}
	var m ctlMsg
	if err := json.Unmarshal(b, &m); err != nil {
		l.stats.malformed.Add(1)
		l.log.Warn("link: malformed control message", "err", err, "bytes", len(b))
		return
	}
	if m.T != msgPing && m.T != msgPong {
		l.log.Debug("link ctl", "type", m.T, "room", m.Room, "id", m.ID, "n", m.N, "mask", m.Mask)
	}
	switch m.T {
	case msgPing:
		l.send(ctlMsg{T: msgPong, TS: m.TS})
	case msgPong:
		if d := time.Now().UnixNano() - m.TS; d > 0 && d < int64(10*time.Second) {
			if old := l.rtt.Load(); old == 0 {
				l.rtt.Store(d)
			} else {
				l.rtt.Store((7*old + d) / 8)
			}
		}
	case msgRooms:
		l.ex.setPeerRooms(m.Rooms)
	case msgWant, msgPLI, msgNack:
		l.ex.onRequest(&m)
	case msgPart, msgLeave, msgPub, msgUnpub, msgData, msgMute:
		l.im.onCtl(&m)
	default:
		l.stats.malformed.Add(1)
		l.log.Warn("link: unknown control message", "type", m.T)
	}
}

// syncLoop keeps the link's view of both nodes current: which rooms this node
// hosts, which participants and tracks it exports, what its receivers need of
// the peer's tracks, and the link's RTT.
func (l *Link) syncLoop() {
	tick := time.NewTicker(syncInterval)
	defer tick.Stop()
	var lastRooms string
	var lastPing time.Time
	for {
		select {
		case <-l.closed:
			return
		case <-tick.C:
		}
		rooms := l.node.hostedRooms()
		key := ""
		for _, r := range rooms {
			key += r + "\x00"
		}
		// Repeated every few seconds too: a lost message must not cut a room.
		if key != lastRooms || time.Since(lastPing) > time.Second {
			l.send(ctlMsg{T: msgRooms, Rooms: rooms})
			lastRooms = key
		}
		if time.Since(lastPing) > time.Second {
			l.send(ctlMsg{T: msgPing, TS: time.Now().UnixNano()})
			lastPing = time.Now()
		}
		l.ex.sync(rooms)
		l.im.sync()
	}
}

// syncInterval is how often a link compares rooms, participants and demand.
const syncInterval = 150 * time.Millisecond

// RTT is the link's smoothed round-trip time (0 before it is measured).
func (l *Link) RTT() time.Duration { return time.Duration(l.rtt.Load()) }

func (l *Link) close(why string) {
	l.closeOnce.Do(func() {
		close(l.closed)
		l.log.Info("node link closed", "why", why)
		_ = l.pc.Close()
		l.ex.closeAll()
		l.im.closeAll()
		l.node.dropLink(l)
	})
}
