package webtransport

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	wt "github.com/quic-go/webtransport-go"

	"github.com/petrel-sfu/petrel/webtransport/moqt"
)

// Client is a MoQT draft-18 client of Petrel (and of any draft-18 relay, without
// the Petrel extensions): Go tests, the interop runner and tools use it. It
// publishes tracks in one namespace and subscribes to tracks.
type Client struct {
	Session *wt.Session
	// Server is the server's SETUP; Petrel its Petrel parameter (room, identity, …).
	Server moqt.Setup
	Petrel map[string]any

	opt     ClientOptions
	ctx     context.Context
	cancel  context.CancelFunc
	tr      *wt.Transport
	setupCh chan struct{}

	mu        sync.Mutex
	nextReq   uint64
	nextAlias uint64
	tracks    map[string]*PubTrack
	subs      map[uint64]*ClientSub
	asmMu     sync.Mutex
	asm       *moqt.Assembler
	pending   atomic.Int32 // unanswered SUBSCRIBEs
	fetches   map[uint64]chan fetchData

	// Lost counts fragments dropped by DatagramLoss, Resent those sent again
	// for NACKs.
	Lost, Resent atomic.Int64
}

// ClientOptions configure Dial.
type ClientOptions struct {
	// CertHash pins the server's certificate by its SHA-256 (development
	// certificates); nil verifies against the system roots unless Insecure.
	CertHash []byte
	Insecure bool
	// Extensions announces Petrel's datagram extensions in SETUP.
	Extensions bool
	// DatagramLoss drops this fraction of first transmissions of fragments
	// (not retransmissions), as a lossy path would: tests of NACK recovery.
	DatagramLoss float64
}

// Dial opens a session to url (https://host:port/v1/moq), with token as the
// `token` query parameter when not empty.
func Dial(ctx context.Context, rawURL, token string, opt ClientOptions) (*Client, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	if token != "" {
		q := u.Query()
		q.Set("token", token)
		u.RawQuery = q.Encode()
	}
	tlsConf := &tls.Config{NextProtos: []string{http3.NextProtoH3}}
	if opt.CertHash != nil || opt.Insecure {
		tlsConf.InsecureSkipVerify = true
		want := opt.CertHash
		tlsConf.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
			if want == nil {
				return nil
			}
			if len(raw) == 0 {
				return errors.New("no certificate")
			}
			h := sha256.Sum256(raw[0])
			if !bytes.Equal(h[:], want) {
				return errors.New("certificate hash mismatch")
			}
			return nil
		}
	}
	tr := &wt.Transport{TLSClientConfig: tlsConf, ApplicationProtocols: []string{Protocol},
		QUICConfig: &quic.Config{EnableDatagrams: true, EnableStreamResetPartialDelivery: true, MaxIdleTimeout: 30 * time.Second,
			KeepAlivePeriod: 5 * time.Second, MaxIncomingStreams: 1000, MaxIncomingUniStreams: 4000}}
	rsp, sess, err := tr.Dial(ctx, u.String(), nil)
	if err != nil {
		_ = tr.Close()
		if rsp != nil {
			return nil, fmt.Errorf("webtransport dial: HTTP %d: %w", rsp.StatusCode, err)
		}
		return nil, fmt.Errorf("webtransport dial: %w", err)
	}
	if rsp.StatusCode != http.StatusOK {
		_ = tr.Close()
		return nil, fmt.Errorf("webtransport dial: HTTP %d", rsp.StatusCode)
	}
	cctx, cancel := context.WithCancel(context.Background())
	c := &Client{Session: sess, opt: opt, ctx: cctx, cancel: cancel, tr: tr, setupCh: make(chan struct{}),
		tracks: map[string]*PubTrack{}, subs: map[uint64]*ClientSub{}, asm: moqt.NewAssembler(), nextAlias: 1}
	go func() { <-sess.Context().Done(); cancel() }()
	ctrl, err := sess.OpenUniStream()
	if err != nil {
		c.Close()
		return nil, err
	}
	params := moqt.Pairs{{Key: moqt.ParamImplementation, Bytes: []byte("petrel-go")}}
	if opt.Extensions {
		params = append(params, moqt.Pair{Key: moqt.ParamPetrel, Bytes: []byte(`{"ext":["dgram"]}`)})
	}
	b, _ := moqt.AppendMessage(nil, moqt.Setup{Params: params})
	if _, err := ctrl.Write(b); err != nil {
		c.Close()
		return nil, err
	}
	go c.acceptUni()
	go c.acceptBidi()
	go c.readDatagrams()
	go c.tick()
	select {
	case <-c.setupCh:
	case <-ctx.Done():
		c.Close()
		return nil, ctx.Err()
	case <-sess.Context().Done():
		c.Close()
		return nil, fmt.Errorf("session closed before SETUP: %w", context.Cause(sess.Context()))
	}
	return c, nil
}

// Close ends the session.
func (c *Client) Close() {
	_ = c.Session.CloseWithError(0, "bye")
	c.cancel()
	_ = c.tr.Close()
}

// Done is closed when the session ends; Err tells why.
func (c *Client) Done() <-chan struct{} { return c.Session.Context().Done() }

// Err is why the session ended: the server's close code and reason when it
// closed it.
func (c *Client) Err() error {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := c.Session.AcceptStream(ctx); err != nil && ctx.Err() == nil {
		return err
	}
	return context.Cause(c.Session.Context())
}

func (c *Client) acceptUni() {
	for {
		st, err := c.Session.AcceptUniStream(c.ctx)
		if err != nil {
			return
		}
		go c.readUni(st)
	}
}

func (c *Client) readUni(st *wt.ReceiveStream) {
	br := bufio.NewReader(st)
	t, err := moqt.ReadVI(br)
	if err != nil {
		return
	}
	if t == moqt.TypeSetup {
		m, err := moqt.ReadMessageAfterType(br, t)
		if err != nil {
			_ = c.Session.CloseWithError(moqt.CloseProtocolViolation, "bad SETUP")
			return
		}
		c.Server = m.(moqt.Setup)
		if p, ok := c.Server.Params.Get(moqt.ParamPetrel); ok {
			_ = json.Unmarshal(p.Bytes, &c.Petrel)
		}
		close(c.setupCh)
		_, _ = io.Copy(io.Discard, br)
		return
	}
	if t == moqt.FetchHeaderType {
		c.readFetch(st, br)
		return
	}
	h, err := moqt.ReadSubgroupHeaderAfterType(br, t)
	if err != nil {
		st.CancelRead(1)
		return
	}
	// The server may open the stream right after SUBSCRIBE_OK, before
	// Subscribe has read that answer: wait a little while one is pending.
	var sub *ClientSub
	for deadline := time.Now().Add(2 * time.Second); ; {
		c.mu.Lock()
		sub = c.subs[h.TrackAlias]
		c.mu.Unlock()
		if sub != nil || c.pending.Load() == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if sub == nil {
		st.CancelRead(1)
		return
	}
	or := moqt.NewObjectReader(br, h, maxObjectBytes)
	for {
		var o moqt.StreamObject
		if err := or.Next(&o); err != nil {
			return
		}
		if o.Status != 0 {
			continue
		}
		sub.push(h.Group, o.ID, o.Extensions, o.Payload)
	}
}

func (c *Client) acceptBidi() {
	for {
		st, err := c.Session.AcceptStream(c.ctx)
		if err != nil {
			return
		}
		go c.serveRequest(st)
	}
}

// serveRequest answers the server's SUBSCRIBE for a published track.
func (c *Client) serveRequest(st *wt.Stream) {
	br := bufio.NewReader(st)
	m, err := moqt.ReadMessage(br)
	if err != nil {
		st.CancelRead(1)
		return
	}
	s, ok := m.(moqt.Subscribe)
	if !ok {
		st.CancelRead(1)
		return
	}
	c.mu.Lock()
	t := c.tracks[s.Track]
	alias := c.nextAlias
	c.nextAlias++
	c.mu.Unlock()
	if t == nil {
		b, _ := moqt.AppendMessage(nil, moqt.RequestError{Code: moqt.ErrCodeDoesNotExist, Reason: "no such track"})
		_, _ = st.Write(b)
		_ = st.Close()
		return
	}
	sub := &pubSub{alias: alias}
	t.mu.Lock()
	t.subs = append(t.subs, sub)
	t.mu.Unlock()
	b, _ := moqt.AppendMessage(nil, moqt.SubscribeOK{TrackAlias: alias})
	if _, err := st.Write(b); err != nil {
		return
	}
	for {
		if _, err := moqt.ReadMessage(br); err != nil {
			break
		}
	}
	t.mu.Lock()
	for i, x := range t.subs {
		if x == sub {
			t.subs = append(t.subs[:i], t.subs[i+1:]...)
			break
		}
	}
	t.mu.Unlock()
	if sub.cur != nil {
		sub.cur.CancelWrite(0)
	}
}

func (c *Client) request(ctx context.Context, m moqt.Message) (*wt.Stream, *bufio.Reader, moqt.Message, error) {
	st, err := c.Session.OpenStreamSync(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	b, err := moqt.AppendMessage(nil, m)
	if err != nil {
		return nil, nil, nil, err
	}
	if _, err := st.Write(b); err != nil {
		return nil, nil, nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = st.SetReadDeadline(dl)
	}
	br := bufio.NewReader(st)
	resp, err := moqt.ReadMessage(br)
	_ = st.SetReadDeadline(time.Time{})
	if err != nil {
		return nil, nil, nil, err
	}
	if e, ok := resp.(moqt.RequestError); ok {
		_ = st.Close()
		return nil, nil, nil, &RequestError{Code: e.Code, Reason: e.Reason}
	}
	return st, br, resp, nil
}

// RequestError is a refused request.
type RequestError struct {
	Code   uint64
	Reason string
}

func (e *RequestError) Error() string {
	return fmt.Sprintf("request refused (0x%x): %s", e.Code, e.Reason)
}

func (c *Client) allocReq() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	id := c.nextReq
	c.nextReq += 2
	return id
}

// Announce publishes namespace ns (PUBLISH_NAMESPACE). Tracks added with
// AddTrack are served to the server's SUBSCRIBEs.
func (c *Client) Announce(ctx context.Context, ns []string) error {
	st, _, resp, err := c.request(ctx, moqt.PublishNamespace{RequestID: c.allocReq(), Namespace: ns})
	if err != nil {
		return err
	}
	if _, ok := resp.(moqt.RequestOK); !ok {
		st.CancelRead(1)
		return fmt.Errorf("unexpected answer %T", resp)
	}
	return nil
}

// AddTrack makes a track available for subscription. Datagrams sends it with
// Petrel's fragment datagrams instead of a stream per group.
func (c *Client) AddTrack(name string, datagrams bool) *PubTrack {
	t := &PubTrack{c: c, name: name, datagrams: datagrams, group: 0, obj: -1}
	c.mu.Lock()
	c.tracks[name] = t
	c.mu.Unlock()
	return t
}

// AddObjectDatagramTrack is AddTrack sending each object as one MoQT
// OBJECT_DATAGRAM (the draft's own datagrams: no fragments, no repair).
func (c *Client) AddObjectDatagramTrack(name string) *PubTrack {
	t := c.AddTrack(name, false)
	t.objectDatagrams = true
	return t
}

// PubTrack is a track the client publishes.
type PubTrack struct {
	c               *Client
	name            string
	datagrams       bool
	objectDatagrams bool
	mu              sync.Mutex
	subs            []*pubSub
	group           uint64
	obj             int64
	started         bool
	onKey           func()
	cache           map[[2]uint64][]byte
	published       *wt.Stream // the PUBLISH request stream of a PUBLISHed track
}

type pubSub struct {
	alias    uint64
	cur      *wt.SendStream
	curGroup uint64
	prev     int64
	waitKey  bool
}

// Subscribers is the number of subscribers (the server counts as one).
func (t *PubTrack) Subscribers() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.subs)
}

// Aliases are the track aliases the track's subscribers were given.
func (t *PubTrack) Aliases() []uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []uint64
	for _, s := range t.subs {
		out = append(out, s.alias)
	}
	return out
}

// OnKeyframeRequest sets what runs when a subscriber asks for a new group.
func (t *PubTrack) OnKeyframeRequest(fn func()) {
	t.mu.Lock()
	t.onKey = fn
	t.mu.Unlock()
}

// WriteFrame sends one frame: a keyframe (or any audio frame: newGroup) starts a
// new group.
func (t *PubTrack) WriteFrame(m *moqt.Meta, newGroup bool, payload []byte) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if newGroup || !t.started {
		if t.started {
			t.group++
		}
		t.obj = 0
		t.started = true
	} else {
		t.obj++
	}
	ext := moqt.AppendExtensions(nil, m)
	var firstErr error
	for _, s := range t.subs {
		var err error
		if t.objectDatagrams {
			_, l, _ := moqt.ParseVI(ext) // the block's length prefix: the datagram codes its own
			err = t.c.Session.SendDatagram(moqt.AppendObjectDatagram(nil, &moqt.ObjectDatagram{TrackAlias: s.alias, Group: t.group,
				Object: uint64(t.obj), Extensions: ext[l:], Payload: payload}))
		} else if t.datagrams {
			data := append(ext, payload...)
			if t.cache == nil {
				t.cache = map[[2]uint64][]byte{}
			}
			if len(t.cache) > 256 {
				clear(t.cache)
			}
			t.cache[[2]uint64{t.group, uint64(t.obj)}] = data
			err = moqt.Split(s.alias, t.group, uint64(t.obj), data, serverDatagramMax, nil, func(dg []byte) {
				if t.c.opt.DatagramLoss > 0 && rand.Float64() < t.c.opt.DatagramLoss {
					t.c.Lost.Add(1)
					return
				}
				_ = t.c.Session.SendDatagram(dg)
			})
		} else {
			err = t.writeStream(s, ext, payload, newGroup)
		}
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

func (t *PubTrack) writeStream(s *pubSub, ext, payload []byte, perObject bool) error {
	if s.cur != nil && (s.curGroup != t.group || perObject) {
		_ = s.cur.Close()
		s.cur = nil
	}
	if s.cur == nil {
		if t.obj != 0 {
			return nil // joined mid-group: wait for the next group
		}
		st, err := t.c.Session.OpenUniStream()
		if err != nil {
			return err
		}
		s.cur, s.curGroup, s.prev = st, t.group, -1
		if _, err := st.Write(moqt.AppendSubgroupHeader(nil, moqt.SubgroupHeader{TrackAlias: s.alias, Group: t.group, Priority: 1})); err != nil {
			return err
		}
	}
	b := moqt.AppendVI(nil, uint64(t.obj)-uint64(s.prev)-1)
	if s.prev < 0 {
		b = moqt.AppendVI(nil, uint64(t.obj))
	}
	s.prev = t.obj
	b = append(b, ext...)
	b = moqt.AppendVI(b, uint64(len(payload)))
	b = append(b, payload...)
	_ = s.cur.SetWriteDeadline(time.Now().Add(2 * time.Second))
	_, err := s.cur.Write(b)
	return err
}

// Object is one received object.
type Object struct {
	Group, ID uint64
	Meta      moqt.Meta
	Payload   []byte
}

// ClientSub is a subscription of the client.
type ClientSub struct {
	c         *Client
	Alias     uint64
	RequestID uint64
	// Largest is SUBSCRIBE_OK's LARGEST_OBJECT: the relay's newest object when
	// the subscription began (a joining FETCH ends there).
	Largest    moqt.Location
	HasLargest bool
	Objects    chan Object
	// Done is closed when the publisher ends the track (PUBLISH_DONE) or the
	// request stream ends; Reason says why.
	Done   chan struct{}
	Reason string
	st     *wt.Stream
}

func (s *ClientSub) push(group, id uint64, ext, payload []byte) {
	o := Object{Group: group, ID: id, Payload: append([]byte(nil), payload...)}
	if err := moqt.ParseExtensions(ext, &o.Meta); err != nil {
		return
	}
	select {
	case s.Objects <- o:
	default: // a slow test reader loses objects, as a slow decoder would
	}
}

// Subscribe subscribes to a track. datagrams asks for Petrel fragment datagrams.
func (c *Client) Subscribe(ctx context.Context, ns []string, track string, datagrams bool) (*ClientSub, error) {
	return c.SubscribeWith(ctx, ns, track, SubscribeOptions{Datagrams: datagrams})
}

// SubscribeOptions are the less common SUBSCRIBE choices.
type SubscribeOptions struct {
	Datagrams bool   // Petrel fragment datagrams
	Filter    uint64 // moqt.FilterNextGroupStart or FilterLargestObject (0: none sent)
}

// SubscribeWith subscribes with options.
func (c *Client) SubscribeWith(ctx context.Context, ns []string, track string, o SubscribeOptions) (*ClientSub, error) {
	var params moqt.Pairs
	if o.Datagrams {
		params = append(params, moqt.Pair{Key: moqt.ParamDelivery, Int: 1})
	}
	if o.Filter != 0 {
		params = append(params, moqt.FilterParam(moqt.Filter{Type: o.Filter}))
	}
	c.pending.Add(1)
	defer c.pending.Add(-1)
	id := c.allocReq()
	st, br, resp, err := c.request(ctx, moqt.Subscribe{RequestID: id, Namespace: ns, Track: track, Params: params})
	if err != nil {
		return nil, err
	}
	ok, isOK := resp.(moqt.SubscribeOK)
	if !isOK {
		st.CancelRead(1)
		return nil, fmt.Errorf("unexpected answer %T", resp)
	}
	s := &ClientSub{c: c, Alias: ok.TrackAlias, RequestID: id, Objects: make(chan Object, 1024), Done: make(chan struct{}), st: st}
	s.Largest, s.HasLargest = ok.Params.LargestObject()
	c.mu.Lock()
	c.subs[s.Alias] = s
	c.mu.Unlock()
	go func() {
		defer close(s.Done)
		for {
			m, err := moqt.ReadMessage(br)
			if err != nil {
				s.Reason = err.Error()
				return
			}
			if d, ok := m.(moqt.PublishDone); ok {
				s.Reason = d.Reason
				return
			}
		}
	}()
	return s, nil
}

// RequestKeyframe asks the publisher of the subscription for a new group.
func (s *ClientSub) RequestKeyframe() {
	_ = s.c.Session.SendDatagram(moqt.AppendKeyframeRequest(nil, &moqt.KeyframeRequest{TrackAlias: s.Alias}))
}

// Unsubscribe ends the subscription.
func (s *ClientSub) Unsubscribe() {
	b, _ := moqt.AppendMessage(nil, moqt.Unsubscribe{})
	_, _ = s.st.Write(b)
	_ = s.st.Close()
	s.c.mu.Lock()
	delete(s.c.subs, s.Alias)
	s.c.mu.Unlock()
}

func (c *Client) readDatagrams() {
	for {
		b, err := c.Session.ReceiveDatagram(c.ctx)
		if err != nil {
			return
		}
		if len(b) > 0 && moqt.IsObjectDatagram(b[0]) {
			var od moqt.ObjectDatagram
			if moqt.ParseObjectDatagram(b, &od) != nil || od.HasStatus {
				continue
			}
			c.mu.Lock()
			s := c.subs[od.TrackAlias]
			c.mu.Unlock()
			if s != nil {
				s.push(od.Group, od.Object, od.Extensions, od.Payload)
			}
			continue
		}
		v, err := moqt.ParseDatagram(b)
		if err != nil {
			continue
		}
		switch v := v.(type) {
		case *moqt.Fragment:
			c.mu.Lock()
			s := c.subs[v.TrackAlias]
			c.mu.Unlock()
			if s == nil {
				continue
			}
			c.asmMu.Lock()
			obj, ok, err := c.asm.Add(v, time.Now())
			c.asmMu.Unlock()
			if ok && err == nil {
				n, l, err := moqt.ParseVI(obj)
				if err == nil && uint64(len(obj)-l) >= n {
					s.push(v.Group, v.Object, obj[l:l+int(n)], obj[l+int(n):])
				}
			}
		case *moqt.FEC:
			c.mu.Lock()
			s := c.subs[v.TrackAlias]
			c.mu.Unlock()
			if s == nil {
				continue
			}
			c.asmMu.Lock()
			obj, ok := c.asm.AddFEC(v, time.Now())
			c.asmMu.Unlock()
			if ok {
				n, l, err := moqt.ParseVI(obj)
				if err == nil && uint64(len(obj)-l) >= n {
					s.push(v.Group, v.Object, obj[l:l+int(n)], obj[l+int(n):])
				}
			}
		case *moqt.KeyframeRequest:
			c.eachTrack(v.TrackAlias, func(t *PubTrack) {
				if t.onKey != nil {
					go t.onKey()
				}
			})
		case *moqt.Nack:
			c.eachTrack(v.TrackAlias, func(t *PubTrack) {
				data := t.cache[[2]uint64{v.Group, v.Object}]
				if data == nil {
					return
				}
				want := map[int]bool{}
				for _, i := range v.Missing {
					want[i] = true
				}
				i := 0
				_ = moqt.Split(v.TrackAlias, v.Group, v.Object, data, serverDatagramMax, nil, func(dg []byte) {
					if want[i] {
						c.Resent.Add(1)
						_ = c.Session.SendDatagram(dg)
					}
					i++
				})
			})
		}
	}
}

// eachTrack runs fn (with the track locked) on the track subscribed under alias.
func (c *Client) eachTrack(alias uint64, fn func(*PubTrack)) {
	c.mu.Lock()
	tracks := make([]*PubTrack, 0, len(c.tracks))
	for _, t := range c.tracks {
		tracks = append(tracks, t)
	}
	c.mu.Unlock()
	for _, t := range tracks {
		t.mu.Lock()
		for _, s := range t.subs {
			if s.alias == alias {
				fn(t)
				break
			}
		}
		t.mu.Unlock()
	}
}

func (c *Client) tick() {
	tk := time.NewTicker(10 * time.Millisecond)
	defer tk.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case now := <-tk.C:
			c.asmMu.Lock()
			nacks, _ := c.asm.Nacks(now, 10*time.Millisecond, 40*time.Millisecond, 500*time.Millisecond)
			c.asmMu.Unlock()
			for i := range nacks {
				_ = c.Session.SendDatagram(moqt.AppendNack(nil, &nacks[i]))
			}
		}
	}
}
