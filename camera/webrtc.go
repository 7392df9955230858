package camera

import (
	"time"

	"github.com/petrel-sfu/petrel/sfu"
)

// A WebRTC camera is a peer: it joins room camera/<id> as identity "camera"
// with the token from POST /v1/cameras/{id}/token and publishes like any
// client, so the SFU fans it out with no ingest code. The gateway only watches
// the room, to show the camera's state and to start its new viewers from the
// cached GOP (a PLI to the camera works too, but costs a round trip and an
// encoder keyframe). Data messages to "camera" reach the camera itself.

// webrtcPoll is how often the room is looked at; state is for display only.
const webrtcPoll = 250 * time.Millisecond

func (c *Camera) webrtcParticipant() *sfu.Participant {
	room := c.g.o.Manager.Room(c.Room())
	if room == nil {
		return nil
	}
	// A client holding the identity is the camera peer (its token has the
	// camera grant); the gateway's own camera or another node's is not.
	p := room.ByIdentity(Identity)
	if p == nil || p.Origin() != sfu.Client {
		return nil
	}
	return p
}

func (c *Camera) watchWebRTC() {
	defer c.done.Done()
	t := time.NewTicker(webrtcPoll)
	defer t.Stop()
	var seen *sfu.Participant
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		p := c.webrtcParticipant()
		if p == nil {
			if seen != nil {
				c.setState(StateWaiting, nil)
				c.syncWall(nil)
				seen = nil
			}
			continue
		}
		if p != seen {
			seen = p
			if seen != nil {
				c.mu.Lock()
				if c.hadSession {
					c.reconnects++
				}
				c.hadSession = true
				c.mu.Unlock()
			}
			c.setState(StateConnecting, nil)
		}
		var video, audio string
		var w, h int
		for _, pub := range p.Publications() {
			info := pub.Info()
			if pub.Kind() == sfu.Video {
				pub.SetGOPStart(true)
				c.syncWall(pub)
				video, w, h = pub.Codec().MimeType, info.Width, info.Height
			} else {
				audio = pub.Codec().MimeType
			}
		}
		c.mu.Lock()
		c.videoCodec, c.audioCodec, c.width, c.height = video, audio, w, h
		state := c.state
		c.mu.Unlock()
		if video != "" || audio != "" {
			if state != StateStreaming {
				c.setState(StateStreaming, nil)
			}
		}
	}
}

// webrtcViewers counts the subscribers of the WebRTC camera's video.
func (c *Camera) webrtcViewers() int {
	p := c.webrtcParticipant()
	if p == nil {
		return 0
	}
	n := 0
	for _, pub := range p.Publications() {
		if pub.Kind() == sfu.Video {
			n = max(n, len(pub.Subscribers()))
		}
	}
	return n
}
