package sfu

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/metrics"
	"github.com/petrel-sfu/petrel/protocol"
)

// Room data messages travel on two data channels of the publisher connection:
// _reliable (ordered, reliable) and _lossy (unordered, no retransmission). The
// framing is in docs/protocol.md: version byte, 16-bit header length, JSON
// header, payload.
const (
	labelReliable = "_reliable"
	labelLossy    = "_lossy"
	dataVersion   = 1
	maxDataHeader = 4096
	// A receiver whose channel has this much queued loses messages rather than
	// holding up the room.
	maxBufferedData = 4 << 20
)

// MaxDataMessage is the largest data channel message a client may send
// under cfg: the payload limit, the header and the framing.
func MaxDataMessage(cfg config.Config) uint32 {
	return uint32(cfg.Limits.MaxDataBytes + maxDataHeader + 16)
}

// DataHeader is the JSON header of a room data message.
type DataHeader struct {
	To      []string `json:"to,omitempty"`
	Topic   string   `json:"topic,omitempty"`
	Text    bool     `json:"text"`
	From    string   `json:"from,omitempty"`
	FromSid string   `json:"fromSid,omitempty"`
}

var errBadData = errors.New("malformed data message")

// ParseData splits a framed data message into its header and payload.
func ParseData(b []byte) (DataHeader, []byte, error) {
	var h DataHeader
	if len(b) < 3 || b[0] != dataVersion {
		return h, nil, errBadData
	}
	n := int(binary.BigEndian.Uint16(b[1:3]))
	if n > maxDataHeader || 3+n > len(b) {
		return h, nil, errBadData
	}
	if err := json.Unmarshal(b[3:3+n], &h); err != nil {
		return h, nil, errBadData
	}
	if len(h.To) > 256 || len(h.Topic) > 256 {
		return h, nil, errBadData
	}
	return h, b[3+n:], nil
}

// EncodeData frames a data message.
func EncodeData(h DataHeader, payload []byte) []byte {
	hb, _ := json.Marshal(h)
	out := make([]byte, 3+len(hb)+len(payload))
	out[0] = dataVersion
	binary.BigEndian.PutUint16(out[1:3], uint16(len(hb)))
	copy(out[3:], hb)
	copy(out[3+len(hb):], payload)
	return out
}

// dataLimiter is a token bucket on a participant's data messages.
type dataLimiter struct {
	mu       sync.Mutex
	tokens   float64
	last     time.Time
	lastWarn time.Time
}

func (l *dataLimiter) allow(rate int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := time.Now()
	if l.last.IsZero() {
		l.tokens = float64(2 * rate)
	} else {
		l.tokens = min(float64(2*rate), l.tokens+t.Sub(l.last).Seconds()*float64(rate))
	}
	l.last = t
	if l.tokens < 1 {
		return false
	}
	l.tokens--
	return true
}

// warnOnce returns true at most once every ten seconds, to keep logs quiet under a flood.
func (l *dataLimiter) warnOnce() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if time.Since(l.lastWarn) < 10*time.Second {
		return false
	}
	l.lastWarn = time.Now()
	return true
}

// openChan is one of a participant's room data channels, admitted: open
// until its reader ends.
type openChan struct {
	dc     DataChannel
	closed atomic.Bool
	rmu    sync.Mutex // one reader at a time: messages are handled in order
}

func (c *openChan) send(b []byte) error { return c.dc.Send(b) }
func (c *openChan) buffered() uint64    { return c.dc.BufferedAmount() }
func (c *openChan) open() bool          { return !c.closed.Load() }

// admitData takes a data channel the client opened, whatever its transport:
// the room's labels only, each on one open channel (a second one would get
// its own reader and take the first one's place), and at most
// Limits.MaxDataChannels at once. It says why not, or "".
func (p *Participant) admitData(label string, c *openChan) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case label != labelReliable && label != labelLossy:
		return "unknown label"
	case p.dcs[label] != nil:
		return "label in use"
	case p.dcOpen >= p.room.mgr.cfg.Limits.MaxDataChannels:
		return "too many data channels"
	}
	p.dcs[label] = c
	p.dcOpen++
	return ""
}

// releaseData forgets an admitted channel once its reader ended.
func (p *Participant) releaseData(label string, c *openChan) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dcs[label] == c {
		delete(p.dcs, label)
	}
	p.dcOpen--
}

// refusedData logs a refused channel, at most once every ten seconds: a
// client can open channels in a loop.
func (p *Participant) refusedData(label, why string) {
	if n, ok := p.dcRefused.Allow(10 * time.Second); ok {
		p.log.Warn("data channel refused", "label", label, "why", why, "unlogged", n)
	}
}

// onDataChannel takes a channel the client opened on its publisher side.
func (p *Participant) onDataChannel(dc DataChannel) {
	label := dc.Label()
	c := &openChan{dc: dc}
	if why := p.admitData(label, c); why != "" {
		p.refusedData(label, why)
		_ = dc.Close()
		return
	}
	// No goroutine per channel: what arrives is read on the transport's
	// goroutine that handed the channel its message (OnReadable).
	dc.OnReadable(func() {
		c.rmu.Lock()
		defer c.rmu.Unlock()
		if c.closed.Load() {
			return
		}
		if err := p.readData(label, dc); !errors.Is(err, ErrNoMessage) {
			c.closed.Store(true)
			p.releaseData(label, c)
		}
	})
}

// readData reads one data channel's messages. A blocked read holds no buffer:
// it waits with an empty one, and SCTP keeps a message that does not fit
// queued (io.ErrShortBuffer), so the message is then read into a pooled buffer
// just large enough.
func (p *Participant) readData(label string, rw io.Reader) error {
	limit := int(MaxDataMessage(p.room.mgr.cfg))
	for {
		n, err := rw.Read(nil)
		if errors.Is(err, io.ErrShortBuffer) {
			n, err = readPooled(rw, limit, func(b []byte) { p.onData(label, b) })
		} else if err == nil && n == 0 {
			p.onData(label, nil)
		}
		if errors.Is(err, io.ErrShortBuffer) {
			metrics.DataMessages.WithLabelValues("too_large").Inc()
			p.log.Warn("data message larger than the limit: closing the channel", "label", label, "limit", limit)
			if c, ok := rw.(io.Closer); ok {
				_ = c.Close()
			}
			return err
		}
		if err != nil {
			return err
		}
	}
}

var (
	smallData = sync.Pool{New: func() any { b := make([]byte, 4<<10); return &b }}
	largeData sync.Pool
)

// readPooled reads the queued message into a 4 KiB buffer or, if it needs more,
// one of limit bytes, and hands it to use before returning the buffer.
func readPooled(r io.Reader, limit int, use func([]byte)) (int, error) {
	bp := smallData.Get().(*[]byte)
	n, err := r.Read(*bp)
	if err == nil {
		use((*bp)[:n])
	}
	smallData.Put(bp)
	if !errors.Is(err, io.ErrShortBuffer) {
		return n, err
	}
	lp, _ := largeData.Get().(*[]byte)
	if lp == nil || len(*lp) != limit {
		b := make([]byte, limit)
		lp = &b
	}
	defer largeData.Put(lp)
	n, err = r.Read(*lp)
	if err == nil {
		use((*lp)[:n])
	}
	return n, err
}

func (p *Participant) onData(label string, b []byte) {
	lim := p.room.mgr.cfg.Limits
	drop := func(why string) {
		metrics.DataMessages.WithLabelValues(why).Inc()
		if p.data.warnOnce() {
			p.log.Warn("data message dropped", "why", why, "bytes", len(b))
		}
	}
	if !p.Grants().PublishData {
		drop("forbidden")
		return
	}
	if len(b) > lim.MaxDataBytes+maxDataHeader {
		drop("too_large")
		return
	}
	if !p.data.allow(lim.DataMessagesPerSecond) {
		drop("rate_limited")
		return
	}
	h, payload, err := ParseData(b)
	if err != nil {
		drop("malformed")
		return
	}
	if len(payload) > lim.MaxDataBytes {
		drop("too_large")
		return
	}
	to := h.To
	h.To = nil
	h.From = p.identity
	h.FromSid = p.sid
	if f := p.room.mgr.dataFilter.Load(); f != nil && (*f)(p, label == labelReliable, h, to, payload) {
		return // consumed by a server component (relaytap.go)
	}
	if tap := p.room.mgr.dataTap.Load(); tap != nil {
		(*tap)(p, label == labelReliable, h, to, payload)
	}
	deliverData(p.room.recipients(p, to), label, h, payload, drop)
}

// deliverData sends one message to each recipient on its channel of that
// label (or to a local participant's handler) and counts those it reached.
func deliverData(to []*Participant, label string, h DataHeader, payload []byte, drop func(why string)) int {
	frame := EncodeData(h, payload)
	n := 0
	for _, r := range to {
		r.mu.Lock()
		dc := r.dcs[label]
		fn := r.dataFn
		r.mu.Unlock()
		if fn != nil {
			fn(label == labelReliable, h, payload)
			metrics.DataMessages.WithLabelValues("forwarded").Inc()
			n++
			continue
		}
		if dc == nil || !dc.open() {
			continue
		}
		if dc.buffered() > maxBufferedData {
			drop("receiver_slow")
			continue
		}
		if err := dc.send(frame); err != nil {
			drop("send_failed")
			continue
		}
		metrics.DataMessages.WithLabelValues("forwarded").Inc()
		n++
	}
	return n
}

// SendData sends a server-originated message (from is empty) to the participant.
func (p *Participant) SendData(reliable bool, h DataHeader, payload []byte) error {
	label := labelLossy
	if reliable {
		label = labelReliable
	}
	p.mu.Lock()
	dc := p.dcs[label]
	p.mu.Unlock()
	if dc == nil {
		return errors.New("no data channel")
	}
	return dc.send(EncodeData(h, payload))
}

// SendData delivers a message from the server itself (no sender) to the room's
// visible participants on this node, or to those of the named identities. It
// returns how many received it; an identity not in the room is an error
// (not_found), an oversize payload too (message_too_large).
func (r *Room) SendData(reliable bool, topic string, text bool, identities []string, payload []byte) (int, error) {
	if len(payload) > r.mgr.cfg.Limits.MaxDataBytes {
		return 0, protocol.Errorf(protocol.CodeTooLarge, "payload over limits.max_data_bytes (%d bytes)", r.mgr.cfg.Limits.MaxDataBytes)
	}
	if len(topic) > 256 || len(identities) > 256 {
		return 0, protocol.Errorf(protocol.CodeBadRequest, "topic over 256 bytes or more than 256 identities")
	}
	var to []*Participant
	for _, p := range r.Participants() {
		if len(identities) == 0 || slices.Contains(identities, p.identity) {
			to = append(to, p)
		}
	}
	for _, id := range identities {
		if !slices.ContainsFunc(to, func(p *Participant) bool { return p.identity == id }) {
			return 0, protocol.Errorf(protocol.CodeNotFound, "no participant %q in room %q", id, r.name)
		}
	}
	label := labelLossy
	if reliable {
		label = labelReliable
	}
	drop := func(why string) { metrics.DataMessages.WithLabelValues(why).Inc() }
	return deliverData(to, label, DataHeader{Topic: topic, Text: text}, payload, drop), nil
}
