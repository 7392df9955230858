package record

import (
	"bufio"
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

// The crash test runs the recorder in a child process (this test binary,
// re-executed) and kills it with SIGKILL while it records.
func TestMain(m *testing.M) {
	if dir := os.Getenv("PETREL_RECORD_CHILD"); dir != "" {
		crashChild(dir, os.Getenv("PETREL_RECORD_CLIP"))
		return
	}
	if dir := os.Getenv("PETREL_RECORD_ROOM_CHILD"); dir != "" {
		roomCrashChild(dir, os.Getenv("PETREL_RECORD_CLIP"))
		return
	}
	os.Exit(m.Run())
}

// crashChild records the clip, looping, until it is killed.
func crashChild(dir, clip string) {
	raw, err := os.ReadFile(clip)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	frames := parseClip(raw)
	mgr := sfu.NewManager(config.Default(), nil, testLog())
	// Two GOPs per segment: the open segment has a fragment on disk half the time.
	rec, err := New(mgr, config.Recording{Dir: dir, Segment: 2 * time.Second}, testLog())
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	_ = rec
	cam, err := mgr.JoinLocal(sfu.LocalOptions{Room: "camera/yard", Identity: "camera",
		Grants: auth.Grants{Publish: true, PublishData: true}, Origin: sfu.Server})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	lt, err := cam.PublishLocal(sfu.LocalTrackOptions{Info: protocol.TrackInfo{Kind: "video", Source: "camera", SSRC: 7}, Codec: h264Codec})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	fmt.Println("recording")
	publishClip(lt, frames, 30*60, nil)
	os.Exit(3) // the parent should have killed us long before
}

func TestCrashLosesAtMostTheOpenSegment(t *testing.T) {
	frames := makeClip(t, 60)
	clipDir := t.TempDir()
	// makeClip parsed the file; write the stream again for the child.
	clip := filepath.Join(clipDir, "clip.h264")
	if err := os.WriteFile(clip, annexB(frames), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "PETREL_RECORD_CHILD="+dir, "PETREL_RECORD_CLIP="+clip)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "recording" {
		t.Fatalf("child: %q", line)
	}
	// Kill once two segments are closed (indexed) and the third has a fragment.
	segDir := filepath.Join(dir, "yard")
	deadline := time.Now().Add(30 * time.Second)
	for {
		idx, _ := filepath.Glob(filepath.Join(segDir, "*.idx"))
		mp4s, _ := filepath.Glob(filepath.Join(segDir, "*.mp4"))
		if len(idx) >= 2 && len(mp4s) > len(idx) {
			open := mp4s[len(mp4s)-1]
			if fi, err := os.Stat(open); err == nil && fi.Size() > 2000 {
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

	closed, _ := filepath.Glob(filepath.Join(segDir, "*.idx"))
	st, err := OpenStore(dir, 0, 0, testLog())
	if err != nil {
		t.Fatalf("reopen after kill -9: %v", err)
	}
	c := st.lookup("yard")
	if c == nil || len(c.segs) < len(closed) {
		t.Fatalf("after the crash: %d segments, %d were closed", len(c.segs), len(closed))
	}
	total := decodesAsIndexed(t, c)
	// Everything closed before the kill survives: at least two seconds of frames.
	if total < 60 {
		t.Fatalf("%d frames survived", total)
	}
	// Playback reads across all of it.
	got := recordedFrames(t, st, "yard")
	if len(got) != total || !got[0].key {
		t.Fatalf("read back %d frames of %d", len(got), total)
	}
	t.Logf("after SIGKILL: %d segments, %d frames recoverable", len(c.segs), total)
}

// annexB writes frames back as an Annex B stream.
func annexB(frames []clipFrame) []byte {
	var b []byte
	for _, f := range frames {
		forNALs(f.data, func(n []byte) {
			b = append(b, 0, 0, 0, 1)
			b = append(b, n...)
		})
	}
	return b
}

// decodesAsIndexed checks that ffmpeg decodes every segment of c to the frames
// its index counts, and returns their total.
func decodesAsIndexed(t *testing.T, c *camStore) int {
	t.Helper()
	total := 0
	for _, seg := range c.segs {
		want := 0
		for _, fr := range seg.Frags {
			want += fr.N
		}
		if n := ffmpegFrames(t, seg.Path); n != want {
			t.Fatalf("%s: decodes %d frames, index says %d", seg.Path, n, want)
		}
		total += want
	}
	return total
}
