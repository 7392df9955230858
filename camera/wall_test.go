package camera_test

import (
	"context"
	"testing"
	"time"

	"github.com/petrel-sfu/petrel/camera"
	"github.com/petrel-sfu/petrel/camera/probe"
	"github.com/petrel-sfu/petrel/client"
	"github.com/petrel-sfu/petrel/config"
)

// The wall: two cold cameras reach one viewer over one peer connection (WHEP
// to room "cameras"), each track decoding; the wall viewer alone wakes the
// cameras, and they go idle again when it leaves.
func TestWallTwoCamerasOneConnection(t *testing.T) {
	emu := startEmulator(t, "")
	srv := startServer(t,
		config.Camera{ID: "north", RTSP: "rtsp://" + emu.Addr() + "/north", IdleAfter: 500 * time.Millisecond},
		config.Camera{ID: "south", RTSP: "rtsp://" + emu.Addr() + "/south", IdleAfter: 500 * time.Millisecond})
	for _, id := range []string{"north", "south"} {
		waitStatus(t, srv, id, "described", func(s camera.Status) bool { return s.State == camera.StateIdle && s.Video != "" })
	}
	// The wall tracks are published shortly after the cameras' own.
	deadline := time.Now().Add(10 * time.Second)
	for {
		room := srv.Manager.Room(camera.WallRoom)
		if room != nil && len(room.Participants()) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the wall room never got both cameras")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// WHEP picks one video unless asked for tracks by sid.
	q := "?"
	for _, p := range srv.Manager.Room(camera.WallRoom).Participants() {
		for _, pub := range p.Publications() {
			q += "track=" + pub.Sid() + "&"
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, err := probe.Open(ctx, probe.Options{Endpoint: "http://" + srv.HTTPAddr + "/whep/" + camera.WallRoom + q,
		Token: token(t, camera.WallRoom, "wall-viewer", false), API: client.LoopbackAPI(), Videos: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.WaitFirstFrame(ctx); err != nil {
		t.Fatal(err)
	}
	for {
		per := v.TrackFrames()
		ok := len(per) == 2
		for _, n := range per {
			ok = ok && n >= 25
		}
		if ok {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("frames per wall track: %v", per)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, id := range []string{"north", "south"} {
		if st := srv.Cameras.Camera(id).Status(); st.State != camera.StateStreaming || st.WallViewers != 1 || st.Viewers != 0 {
			t.Fatalf("%s: %+v", id, st)
		}
	}
	v.Close()
	for _, id := range []string{"north", "south"} {
		waitStatus(t, srv, id, "idle after the wall viewer left", func(s camera.Status) bool { return s.State == camera.StateIdle })
	}
}
