package webtransport

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"

	wt "github.com/quic-go/webtransport-go"

	"github.com/petrel-sfu/petrel/webtransport/moqt"
)

// The Go client's side of FETCH, SUBSCRIBE_NAMESPACE and PUBLISH (the
// server's side is requests.go).

// FetchResult is an answered FETCH: FETCH_OK and the objects of its stream.
type FetchResult struct {
	OK      moqt.FetchOK
	Objects []Object
}

type fetchData struct {
	objs []Object
	err  error
}

// Fetch sends f (its RequestID is assigned here) and reads the objects.
func (c *Client) Fetch(ctx context.Context, f moqt.Fetch) (*FetchResult, error) {
	f.RequestID = c.allocReq()
	ch := make(chan fetchData, 1)
	c.mu.Lock()
	if c.fetches == nil {
		c.fetches = map[uint64]chan fetchData{}
	}
	c.fetches[f.RequestID] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.fetches, f.RequestID)
		c.mu.Unlock()
	}()
	st, _, resp, err := c.request(ctx, f)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	ok, isOK := resp.(moqt.FetchOK)
	if !isOK {
		st.CancelRead(1)
		return nil, fmt.Errorf("unexpected answer %T", resp)
	}
	select {
	case d := <-ch:
		return &FetchResult{OK: ok, Objects: d.objs}, d.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// readFetch reads a FETCH data stream (its type already read).
func (c *Client) readFetch(st *wt.ReceiveStream, br *bufio.Reader) {
	id, err := moqt.ReadFetchHeader(br)
	c.mu.Lock()
	ch := c.fetches[id]
	c.mu.Unlock()
	if err != nil || ch == nil {
		st.CancelRead(1)
		return
	}
	var d fetchData
	dec := moqt.NewFetchDecoder(br, maxObjectBytes)
	for {
		var fo moqt.FetchObject
		if err := dec.Next(&fo); err != nil {
			if !errors.Is(err, io.EOF) {
				d.err = err
			}
			break
		}
		o := Object{Group: fo.Group, ID: fo.Object, Payload: fo.Payload}
		if err := moqt.ParseExtensions(fo.Extensions, &o.Meta); err != nil {
			d.err = err
			break
		}
		d.objs = append(d.objs, o)
	}
	ch <- d
}

// NamespaceEvent is a NAMESPACE (Done false) or NAMESPACE_DONE.
type NamespaceEvent struct {
	Suffix []string
	Done   bool
}

// NamespaceSub is a SUBSCRIBE_NAMESPACE: Events until the request ends.
type NamespaceSub struct {
	Events chan NamespaceEvent
	st     *wt.Stream
}

// SubscribeNamespace asks for the namespaces under prefix, as they come and go.
func (c *Client) SubscribeNamespace(ctx context.Context, prefix []string) (*NamespaceSub, error) {
	st, br, resp, err := c.request(ctx, moqt.SubscribeNamespace{RequestID: c.allocReq(), Prefix: prefix})
	if err != nil {
		return nil, err
	}
	if _, ok := resp.(moqt.RequestOK); !ok {
		st.CancelRead(1)
		return nil, fmt.Errorf("unexpected answer %T", resp)
	}
	n := &NamespaceSub{Events: make(chan NamespaceEvent, 64), st: st}
	go func() {
		defer close(n.Events)
		for {
			m, err := moqt.ReadMessage(br)
			if err != nil {
				return
			}
			switch m := m.(type) {
			case moqt.Namespace:
				n.Events <- NamespaceEvent{Suffix: m.Suffix}
			case moqt.NamespaceDone:
				n.Events <- NamespaceEvent{Suffix: m.Suffix, Done: true}
			}
		}
	}()
	return n, nil
}

// Close ends the request.
func (n *NamespaceSub) Close() { _ = n.st.Close() }

// Publish offers a track without waiting to be asked (PUBLISH): the client
// picks the alias; objects written to the returned track go to the server.
// objectDatagrams sends each object as one OBJECT_DATAGRAM instead of streams.
func (c *Client) Publish(ctx context.Context, ns []string, name string, objectDatagrams bool) (*PubTrack, error) {
	c.mu.Lock()
	alias := c.nextAlias
	c.nextAlias++
	c.mu.Unlock()
	st, _, resp, err := c.request(ctx, moqt.Publish{RequestID: c.allocReq(), Namespace: ns, Track: name, TrackAlias: alias})
	if err != nil {
		return nil, err
	}
	if _, ok := resp.(moqt.PublishOK); !ok {
		st.CancelRead(1)
		return nil, fmt.Errorf("unexpected answer %T", resp)
	}
	t := &PubTrack{c: c, name: name, objectDatagrams: objectDatagrams, obj: -1, published: st, subs: []*pubSub{{alias: alias}}}
	c.mu.Lock()
	c.tracks["\x00published/"+name] = t // found by alias for keyframe requests; never by a SUBSCRIBE's name
	c.mu.Unlock()
	return t, nil
}

// End finishes a PUBLISHed track with PUBLISH_DONE.
func (t *PubTrack) End(reason string) error {
	if t.published == nil {
		return errors.New("not a PUBLISHed track")
	}
	t.mu.Lock()
	for _, s := range t.subs {
		if s.cur != nil {
			_ = s.cur.Close()
			s.cur = nil
		}
	}
	t.mu.Unlock()
	b, _ := moqt.AppendMessage(nil, moqt.PublishDone{Status: 0x2, Reason: reason})
	_, err := t.published.Write(b)
	_ = t.published.Close()
	return err
}

// NextAlias is the track alias the client will give next (tests use it to
// make a PUBLISH that reuses a live one).
func (c *Client) NextAlias() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nextAlias
}

// Reset ends the subscription by resetting its request stream (what a peer
// that gives up on a request does) rather than with UNSUBSCRIBE.
func (s *ClientSub) Reset() {
	s.st.CancelWrite(1)
	s.st.CancelRead(1)
	s.c.mu.Lock()
	delete(s.c.subs, s.Alias)
	s.c.mu.Unlock()
}
