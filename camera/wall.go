package camera

import (
	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/sfu"
)

// The viewer wall: every camera is also published in one room, WallRoom, by a
// local participant "camera-<id>" (named after the camera), so that a viewer
// who joins that room (room protocol or WHEP) receives many cameras over one
// peer connection. Each wall track is fed by a sink on the camera's own video
// publication: one copy per packet, and the wall track has its own cache, so
// wall viewers start from the cached GOP too. Only video goes to the wall.
const WallRoom = auth.CameraWallRoom

// wallFeed mirrors one camera's video into the wall room.
type wallFeed struct {
	c      *Camera
	part   *sfu.Participant
	track  *sfu.LocalTrack
	src    *sfu.Publication
	remove func()
	buf    []byte // the sink runs on the publication's one forwarding goroutine
}

// WriteRTP is the sink on the camera's publication: copy into the wall track.
func (f *wallFeed) WriteRTP(p *sfu.Packet) {
	h := p.Header
	h.Padding, h.PaddingSize = false, 0
	n, err := h.MarshalTo(f.buf)
	if err != nil || n+len(p.Payload) > len(f.buf) {
		return
	}
	n += copy(f.buf[n:], p.Payload)
	_ = f.track.WriteRTP(f.buf[:n])
}

func (f *wallFeed) close() {
	if f.remove != nil {
		f.remove()
	}
	f.track.Close()
	f.part.Close("camera_removed")
}

// syncWall (re)attaches the wall feed to the camera's current video
// publication; it is called when the camera's video track changes.
func (c *Camera) syncWall(src *sfu.Publication) {
	c.wallMu.Lock()
	defer c.wallMu.Unlock()
	if c.wall != nil && c.wall.src == src {
		return
	}
	if c.wall != nil {
		c.wall.close()
		c.wall = nil
	}
	if src == nil || c.ctx.Err() != nil {
		return
	}
	p, err := c.g.o.Manager.JoinLocal(sfu.LocalOptions{Room: WallRoom, Identity: auth.WallPrefix + c.cfg.ID, Name: c.name(),
		Grants: auth.Grants{Publish: true}, Origin: sfu.Server})
	if err != nil {
		c.log.Warn("wall: join", "err", err)
		return
	}
	info := src.Info()
	lt, err := p.PublishLocal(sfu.LocalTrackOptions{
		Info:  protocol.TrackInfo{Kind: "video", Source: "camera", Name: c.name(), SSRC: randU32(), Width: info.Width, Height: info.Height},
		Codec: src.Codec(),
	})
	if err != nil {
		p.Close("failed")
		c.log.Warn("wall: publish", "err", err)
		return
	}
	lt.Publication().SetGOPStart(true)
	f := &wallFeed{c: c, part: p, track: lt, src: src, buf: make([]byte, 1500)}
	// A wall viewer's keyframe request is the camera's: a cold RTSP camera
	// wakes up, a WebRTC camera gets a PLI.
	lt.OnKeyframeRequest(func() {
		c.wake()
		src.RequestKeyframe()
	})
	// Quiet: the mirror's own keyframe request would wake a cold camera with
	// nobody watching; a wall viewer's subscription asks (above) when needed.
	f.remove = src.AddSinkQuiet(f)
	c.wall = f
}

func (c *Camera) name() string {
	if c.cfg.Name != "" {
		return c.cfg.Name
	}
	return c.cfg.ID
}

// wallViewers counts the subscribers of the camera's wall track.
func (c *Camera) wallViewers() int {
	c.wallMu.Lock()
	defer c.wallMu.Unlock()
	if c.wall == nil {
		return 0
	}
	return len(c.wall.track.Publication().Subscribers())
}

// ownSinks is how many sinks on the camera's video are the gateway's own (the
// wall feed), which must not keep a cold camera open by themselves.
func (c *Camera) ownSinks() int {
	c.wallMu.Lock()
	defer c.wallMu.Unlock()
	if c.wall == nil {
		return 0
	}
	return 1
}
