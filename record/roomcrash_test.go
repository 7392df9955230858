package record

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/sfu"
)

// roomCrashChild records room "crash-room", which the room setting records
// on creation, while alice publishes the clip, until it is killed.
func roomCrashChild(dir, clip string) {
	raw, err := os.ReadFile(clip)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	frames := parseClip(raw)
	mgr := sfu.NewManager(config.Default(), nil, testLog())
	if _, err := New(mgr, config.Recording{Dir: dir, Segment: 2 * time.Second, Rooms: []string{"crash-*"}}, testLog()); err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	p, err := mgr.JoinLocal(sfu.LocalOptions{Room: "crash-room", Identity: "alice", Grants: auth.Grants{Publish: true}})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	lt, err := p.PublishLocal(sfu.LocalTrackOptions{Info: protocol.TrackInfo{Kind: "video", Source: "camera", SSRC: 7}, Codec: h264Codec})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	fmt.Println("recording")
	publishClip(lt, frames, 30*60, nil)
	os.Exit(3)
}

// A room recording killed with SIGKILL keeps every closed segment and what
// the open one had flushed; on the next start it is listed as crashed, and
// its export decodes.
func TestRoomRecordingCrash(t *testing.T) {
	frames := makeClip(t, 60)
	clip := filepath.Join(t.TempDir(), "clip.h264")
	if err := os.WriteFile(clip, annexB(frames), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "PETREL_RECORD_ROOM_CHILD="+dir, "PETREL_RECORD_CLIP="+clip)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	if line, _ := bufio.NewReader(out).ReadString('\n'); strings.TrimSpace(line) != "recording" {
		t.Fatalf("child: %q", line)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		idx, _ := filepath.Glob(filepath.Join(dir, roomsDir, "*", "t1", "*.idx"))
		mp4s, _ := filepath.Glob(filepath.Join(dir, roomsDir, "*", "t1", "*.mp4"))
		if len(idx) >= 2 && len(mp4s) > len(idx) {
			if fi, err := os.Stat(mp4s[len(mp4s)-1]); err == nil && fi.Size() > 2000 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("child recorded %d segments (%d indexed) in 30 s", len(mp4s), len(idx))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	closed, _ := filepath.Glob(filepath.Join(dir, roomsDir, "*", "t1", "*.idx"))

	rec, err := New(sfu.NewManager(config.Default(), nil, testLog()), config.Recording{Dir: dir, Segment: 2 * time.Second}, testLog())
	if err != nil {
		t.Fatalf("reopen after kill -9: %v", err)
	}
	defer rec.Close()
	list := rec.RoomRecordings()
	if len(list) != 1 || list[0].Room != "crash-room" || list[0].By != "config" || !list[0].Crashed || list[0].Active ||
		len(list[0].Tracks) != 1 || list[0].Tracks[0].Identity != "alice" {
		t.Fatalf("after the crash: %+v", list)
	}
	rr, _ := rec.roomRecording(list[0].ID)
	c := rr.store.lookup("t1")
	if c == nil || len(c.segs) < len(closed) {
		t.Fatalf("after the crash: %d segments, %d were closed", len(c.segs), len(closed))
	}
	total := decodesAsIndexed(t, c)
	if total < 60 {
		t.Fatalf("%d frames survived", total)
	}
	if list[0].End <= list[0].Start {
		t.Fatalf("crashed recording ends at %d, started %d", list[0].End, list[0].Start)
	}
	var buf bytes.Buffer
	if err := rec.ExportRoom(list[0].ID, &buf); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "export.mp4")
	if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if n := ffmpegFrames(t, file); n != total {
		t.Fatalf("export decodes %d frames of %d", n, total)
	}
	t.Logf("after SIGKILL: %d segments, %d frames recoverable", len(c.segs), total)
}
