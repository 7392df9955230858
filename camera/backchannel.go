package camera

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/bluenviron/gortsplib/v4"
	"github.com/bluenviron/gortsplib/v4/pkg/base"
	"github.com/bluenviron/gortsplib/v4/pkg/description"
	"github.com/bluenviron/gortsplib/v4/pkg/format"
	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/sfu"
)

// Topic talk: two-way audio. A viewer asks for the floor, the gateway answers
// with the codec the camera's loudspeaker takes, the viewer publishes its
// microphone (source "microphone") in the camera's room with that codec, and
// the gateway carries it to the camera until the viewer stops, leaves, or
// unpublishes. One viewer talks at a time per camera.
//
//	{"id":1,"op":"start"} → {"id":1,"result":{"codec":"audio/PCMU"}}
//	{"id":2,"op":"stop"}  → {"id":2,"result":{}}
//	(gateway → viewer)       {"event":"ended","reason":"..."}
//
// An RTSP camera gets the audio through the ONVIF audio backchannel: a second
// RTSP session with "Require: www.onvif.org/ver20/backchannel", whose
// sendonly media is set up and played, after which we send RTP on it
// (gortsplib's client does this). No transcoding happens: browsers encode
// G.711 themselves when asked (the SDK's publish option codec), so a camera
// that takes only G.711 gets G.711 from the browser, and one that takes Opus
// gets Opus. A pure-Go Opus decoder is not among the dependencies; negotiating
// the codec at the source needs none.
//
// A WebRTC camera is a peer in the room: the gateway subscribes it to the
// talker's microphone (and to no other viewer's) for the duration.

const (
	talkWaitTrack = 15 * time.Second // for the viewer's microphone to appear
	talkQueue     = 64               // packets between the SFU and the RTSP writer
	talkMismatch  = 3 * time.Second  // an audio track in the wrong codec, before giving up
)

type talkRequest struct {
	ID json.RawMessage `json:"id"`
	Op string          `json:"op"`
}

// talkFloor is one camera's floor: who talks, and how to end it.
type talkFloor struct {
	holder string
	cancel context.CancelFunc
	done   chan struct{}
}

// handleTalk is the TopicHandler of topic talk.
func handleTalk(c *Camera, from string, _ bool, payload []byte) {
	var req talkRequest
	if len(payload) > 1024 || json.Unmarshal(payload, &req) != nil {
		c.log.Info("talk: malformed request", "from", from)
		c.Reply(from, "talk", errorReply(payload, "request is not a JSON object with op start or stop"))
		return
	}
	switch req.Op {
	case "start":
		c.devMu.Lock()
		f := c.floor
		if f != nil {
			c.devMu.Unlock()
			if f.holder == from {
				c.Reply(from, "talk", errReply(req.ID, "already talking"))
			} else {
				c.Reply(from, "talk", errReply(req.ID, "floor taken: "+f.holder+" is talking"))
			}
			return
		}
		ctx, cancel := context.WithCancel(c.ctx)
		f = &talkFloor{holder: from, cancel: cancel, done: make(chan struct{})}
		c.floor = f
		c.devMu.Unlock()
		go func() {
			defer close(f.done)
			reason := c.talk(ctx, from, req.ID)
			cancel()
			c.devMu.Lock()
			if c.floor == f {
				c.floor = nil
			}
			c.devMu.Unlock()
			c.log.Info("talk ended", "from", from, "reason", reason)
			b, _ := json.Marshal(map[string]string{"event": "ended", "reason": reason})
			c.Reply(from, "talk", b)
		}()
	case "stop":
		c.devMu.Lock()
		f := c.floor
		c.devMu.Unlock()
		if f == nil || f.holder != from {
			c.Reply(from, "talk", errReply(req.ID, "not talking"))
			return
		}
		f.cancel()
		// Wait (briefly: this is the camera's message goroutine) so that the
		// reply means the audio stopped.
		select {
		case <-f.done:
		case <-time.After(2 * time.Second):
		}
		c.Reply(from, "talk", result(req.ID, map[string]any{}))
	default:
		c.Reply(from, "talk", errReply(req.ID, fmt.Sprintf("unknown op %q (start, stop)", clipText(req.Op, 32))))
	}
}

// Talking reports who holds the camera's floor ("" if nobody).
func (c *Camera) Talking() string {
	c.devMu.Lock()
	defer c.devMu.Unlock()
	if f := c.floor; f != nil {
		return f.holder
	}
	return ""
}

// talk runs one talk session and returns why it ended.
func (c *Camera) talk(ctx context.Context, from string, id json.RawMessage) string {
	cfg := c.Config()
	if cfg.WebRTC {
		return c.talkWebRTC(ctx, from, id)
	}
	target := cfg.ONVIF.Backchannel
	if target == "" {
		target = cfg.RTSP
	}
	if target == "" {
		c.Reply(from, "talk", errReply(id, "camera "+c.ID()+" has no audio backchannel (no RTSP URL)"))
		return "no backchannel"
	}
	bc, err := dialBackchannel(ctx, target)
	if err != nil {
		c.log.Info("talk: backchannel unavailable", "err", err)
		c.Reply(from, "talk", errReply(id, "camera backchannel: "+err.Error()))
		return "backchannel unavailable"
	}
	defer bc.close()
	c.Reply(from, "talk", result(id, map[string]any{"codec": bc.mime}))

	pub, why := c.waitMicrophone(ctx, from, bc.mime)
	if pub == nil {
		return why
	}
	q := make(chan []byte, talkQueue)
	remove := pub.AddSink(&queueSink{q: q})
	defer remove()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	var pkt rtp.Packet
	for {
		select {
		case <-ctx.Done():
			return "stopped"
		case err := <-bc.failed:
			return "camera backchannel closed: " + err.Error()
		case <-tick.C:
			if !c.stillPublished(from, pub) {
				return "microphone unpublished"
			}
		case raw := <-q:
			if pkt.Unmarshal(raw) != nil {
				continue
			}
			pkt.PayloadType = bc.pt
			pkt.Extension, pkt.Extensions = false, nil // WebRTC header extensions mean nothing to the camera
			pkt.Padding, pkt.PaddingSize = false, 0
			if err := bc.client.WritePacketRTP(bc.media, &pkt); err != nil {
				return "writing to the camera: " + err.Error()
			}
		}
	}
}

// waitMicrophone finds the viewer's published audio in the camera's room: one
// in codec mime if it has one (a viewer may also publish its ordinary Opus
// microphone), preferring source "microphone"; "" accepts any codec. A viewer
// whose only audio stays in another codec for talkMismatch is told so.
func (c *Camera) waitMicrophone(ctx context.Context, from, mime string) (*sfu.Publication, string) {
	deadline := time.NewTimer(talkWaitTrack)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var mismatchSince time.Time
	for {
		var best, other *sfu.Publication
		if r := c.g.o.Manager.Room(c.Room()); r != nil {
			p := r.ByIdentity(from)
			if p == nil {
				return nil, "viewer left"
			}
			for _, pub := range p.Publications() {
				if pub.Info().Kind != "audio" {
					continue
				}
				if mime != "" && !strings.EqualFold(pub.Codec().MimeType, mime) {
					other = pub
					continue
				}
				if best == nil || pub.Info().Source == "microphone" {
					best = pub
				}
			}
		}
		if best != nil {
			return best, ""
		}
		if other == nil {
			mismatchSince = time.Time{}
		} else if mismatchSince.IsZero() {
			mismatchSince = time.Now()
		} else if time.Since(mismatchSince) > talkMismatch {
			return nil, fmt.Sprintf("the microphone is %s, the camera takes %s", other.Codec().MimeType, mime)
		}
		select {
		case <-ctx.Done():
			return nil, "stopped"
		case <-deadline.C:
			return nil, "no microphone published within " + talkWaitTrack.String()
		case <-tick.C:
		}
	}
}

func (c *Camera) stillPublished(from string, pub *sfu.Publication) bool {
	r := c.g.o.Manager.Room(c.Room())
	if r == nil {
		return false
	}
	p := r.ByIdentity(from)
	if p == nil {
		return false
	}
	for _, x := range p.Publications() {
		if x == pub {
			return true
		}
	}
	return false
}

// talkWebRTC subscribes the camera peer to the talker's microphone only.
func (c *Camera) talkWebRTC(ctx context.Context, from string, id json.RawMessage) string {
	c.Reply(from, "talk", result(id, map[string]any{"codec": "any"}))
	pub, why := c.waitMicrophone(ctx, from, "")
	if pub == nil {
		return why
	}
	floor := func(on bool) {
		r := c.g.o.Manager.Room(c.Room())
		if r == nil {
			return
		}
		cam := c.webrtcParticipant()
		if cam == nil {
			return
		}
		// Everyone's microphone but the talker's is off for the camera.
		var off []string
		for _, p := range r.Participants() {
			if p == cam {
				continue
			}
			for _, x := range p.Publications() {
				if x.Info().Kind == "audio" && x != pub {
					off = append(off, x.Info().Sid)
				}
			}
		}
		if len(off) > 0 {
			_ = cam.SetSubscribed(off, false)
		}
		_ = cam.SetSubscribed([]string{pub.Info().Sid}, on)
	}
	floor(true)
	defer floor(false)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return "stopped"
		case <-tick.C:
			if !c.stillPublished(from, pub) {
				return "microphone unpublished"
			}
			floor(true) // the camera may have rejoined
		}
	}
}

// queueSink hands a publication's packets to the backchannel writer. It runs
// on the publisher's read path: copy, never block (a full queue drops, as a
// congested link would).
type queueSink struct{ q chan []byte }

func (s *queueSink) WriteRTP(p *sfu.Packet) {
	b, err := p.Header.Marshal()
	if err != nil {
		return
	}
	select {
	case s.q <- append(b, p.Payload...):
	default:
	}
}

// backchannel is an open ONVIF audio backchannel session.
type backchannel struct {
	client *gortsplib.Client
	media  *description.Media
	pt     uint8
	mime   string
	failed chan error
}

// dialBackchannel opens the RTSP session and sets up the backchannel media,
// preferring Opus (what browsers send by default), then G.711 µ-law, then A-law.
func dialBackchannel(ctx context.Context, raw string) (*backchannel, error) {
	u, err := base.ParseURL(raw)
	if err != nil {
		return nil, fmt.Errorf("backchannel URL: %w", err)
	}
	if pu, err := url.Parse(raw); err != nil || (pu.Scheme != "rtsp" && pu.Scheme != "rtsps") {
		return nil, errors.New("backchannel URL must be rtsp://")
	}
	tcp := gortsplib.TransportTCP
	bc := &backchannel{failed: make(chan error, 1)}
	cl := &gortsplib.Client{
		RequestBackChannels: true,
		Transport:           &tcp,
		ReadTimeout:         10 * time.Second,
		WriteTimeout:        5 * time.Second,
		UserAgent:           "Petrel",
	}
	if err := cl.Start(u.Scheme, u.Host); err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { cl.Close() })
	defer stop()
	desc, _, err := cl.Describe(u)
	if err != nil {
		cl.Close()
		return nil, err
	}
	rank := func(f format.Format) (int, string) {
		switch f := f.(type) {
		case *format.Opus:
			return 3, webrtc.MimeTypeOpus
		case *format.G711:
			if f.SampleRate != 0 && f.SampleRate != 8000 || f.ChannelCount > 1 {
				return 0, ""
			}
			if f.MULaw {
				return 2, webrtc.MimeTypePCMU
			}
			return 1, webrtc.MimeTypePCMA
		}
		return 0, ""
	}
	best := 0
	for _, m := range desc.Medias {
		if !m.IsBackChannel || m.Type != description.MediaTypeAudio {
			continue
		}
		for _, f := range m.Formats {
			if r, mime := rank(f); r > best {
				best, bc.media, bc.pt, bc.mime = r, m, f.PayloadType(), mime
			}
		}
	}
	if bc.media == nil {
		cl.Close()
		return nil, errors.New("the camera announces no audio backchannel in Opus or G.711")
	}
	if _, err := cl.Setup(desc.BaseURL, bc.media, 0, 0); err != nil {
		cl.Close()
		return nil, err
	}
	if _, err := cl.Play(nil); err != nil {
		cl.Close()
		return nil, err
	}
	bc.client = cl
	go func() {
		err := cl.Wait()
		if err == nil {
			err = errors.New("closed")
		}
		bc.failed <- err
	}()
	return bc, nil
}

func (b *backchannel) close() { b.client.Close() }
