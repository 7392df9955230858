package record

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/sfu"
)

func testLog() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func TestPacketizeRoundTrip(t *testing.T) {
	frames := makeClip(t, 31)
	for _, mtu := range []int{1200, 300} {
		z := packetizer{mtu: mtu}
		for i, f := range frames {
			var a assembler
			var packets int
			z.payloads(f.data, func(p []byte, last bool) {
				if len(p) > mtu {
					t.Fatalf("payload of %d bytes > mtu %d", len(p), mtu)
				}
				packets++
				if err := a.push(append([]byte(nil), p...)); err != nil {
					t.Fatalf("frame %d: %v", i, err)
				}
			})
			if !bytes.Equal(a.buf, f.data) || a.key != f.key {
				t.Fatalf("mtu %d frame %d: round trip differs (%d vs %d bytes, key %v/%v)", mtu, i, len(a.buf), len(f.data), a.key, f.key)
			}
			if a.key && (len(a.sps) == 0 || len(a.pps) == 0) {
				t.Fatalf("keyframe %d: parameter sets not seen", i)
			}
		}
	}
}

func TestAssemblerRejectsGarbage(t *testing.T) {
	for _, p := range [][]byte{{}, {24}, {24, 0, 9, 1}, {28}, {28, 0x85}, {0}, {25, 1, 2}} {
		var a assembler
		_ = a.push(p) // must not panic; errors are fine
	}
	var a assembler
	if err := a.push([]byte{24, 0, 200, 1, 2}); err == nil {
		t.Fatal("STAP-A overrun accepted")
	}
}

// camEnv is a manager with a camera publishing the test clip into camera/<id>
// and a recorder recording it.
type camEnv struct {
	mgr    *sfu.Manager
	rec    *Recorder
	cam    *sfu.Participant
	lt     *sfu.LocalTrack
	frames []clipFrame
	dir    string
}

func newCamEnv(t *testing.T, dir string, seg time.Duration) *camEnv {
	t.Helper()
	cfg := config.Default()
	mgr := sfu.NewManager(cfg, nil, testLog())
	rec, err := New(mgr, config.Recording{Dir: dir, Segment: seg}, testLog())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rec.Close)
	cam, err := mgr.JoinLocal(sfu.LocalOptions{Room: "camera/door", Identity: "camera",
		Grants: auth.Grants{Publish: true, PublishData: true}, Origin: sfu.Server})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cam.Close("test over") })
	lt, err := cam.PublishLocal(sfu.LocalTrackOptions{Info: protocol.TrackInfo{Kind: "video", Source: "camera", SSRC: 42},
		Codec: h264Codec})
	if err != nil {
		t.Fatal(err)
	}
	return &camEnv{mgr: mgr, rec: rec, cam: cam, lt: lt, dir: dir}
}

// waitRecorded waits until the recorder has the camera's track attached.
func (e *camEnv) waitAttached(t *testing.T) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		e.rec.mu.Lock()
		n := len(e.rec.tracks)
		e.rec.mu.Unlock()
		if n > 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("recorder never attached to the camera track")
}

// recordClip publishes frames in real time and stops the track, so every
// segment is closed and indexed.
func (e *camEnv) recordClip(t *testing.T, frames []clipFrame, count int) {
	e.frames = frames
	e.waitAttached(t)
	publishClip(e.lt, frames, count, nil)
	// Let the forwarding goroutine drain, then end the track: its last GOP goes to disk.
	time.Sleep(300 * time.Millisecond)
	e.lt.Close()
	// The recorder drops the track from its table before the track's
	// goroutine has closed the last segment (on a loaded machine that can
	// take a while): wait for both, so that every segment is closed (indexed,
	// subject to retention) when this returns.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		e.rec.mu.Lock()
		n := len(e.rec.tracks)
		e.rec.mu.Unlock()
		if n == 0 && !e.anyOpen() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("recorder did not finish with the track (a segment open: %v)", e.anyOpen())
}

// anyOpen reports whether a segment of the camera is still being written.
func (e *camEnv) anyOpen() bool {
	c := e.rec.store.lookup("door")
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, seg := range c.segs {
		if seg.open {
			return true
		}
	}
	return false
}

// recordedFrames reads every recorded sample back.
func recordedFrames(t *testing.T, st *Store, id string) []sample {
	t.Helper()
	c := st.lookup(id)
	if c == nil {
		t.Fatal("no recordings")
	}
	rd, err := c.openAt(0)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.close()
	var out []sample
	for {
		s, err := rd.next()
		if err != nil {
			break
		}
		out = append(out, s)
	}
	return out
}

func TestRecordSegmentsAndIndex(t *testing.T) {
	frames := makeClip(t, 90)
	dir := t.TempDir()
	e := newCamEnv(t, dir, time.Second)
	e.recordClip(t, frames, 90)

	idx := frameIndex(frames)
	got := recordedFrames(t, e.rec.store, "door")
	if len(got) < 60 {
		t.Fatalf("recorded %d frames of 90", len(got))
	}
	if !got[0].key {
		t.Fatal("recording does not start on a keyframe")
	}
	// Frames are the clip's frames in order, bit for bit, 1/30 s apart.
	first, ok := idx[hashOf(got[0].data)]
	if !ok {
		t.Fatal("first recorded frame is not a clip frame")
	}
	for i, s := range got {
		n, ok := idx[hashOf(s.data)]
		if !ok || n != first+i {
			t.Fatalf("recorded frame %d is clip frame %d (ok %v), want %d", i, n, ok, first+i)
		}
		if i > 0 && s.t-got[i-1].t != 3000 {
			t.Fatalf("frame %d: %d ticks after its predecessor, want 3000", i, s.t-got[i-1].t)
		}
	}
	// Segments of about a second, each starting on a keyframe, indexed on disk.
	files, _ := filepath.Glob(filepath.Join(dir, "door", "*.mp4"))
	if len(files) < 2 {
		t.Fatalf("%d segment files, want at least 2 of 1 s", len(files))
	}
	for _, f := range files {
		seg, err := openSegment(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(indexPath(f)); err != nil {
			t.Fatalf("no index beside closed segment %s", f)
		}
		if !seg.Frags[0].Key {
			t.Fatalf("%s does not start on a keyframe", f)
		}
		// Another MP4 reader agrees: ffmpeg decodes every frame without error.
		n := ffmpegFrames(t, f)
		want := 0
		for _, fr := range seg.Frags {
			want += fr.N
		}
		if n != want {
			t.Fatalf("%s: ffmpeg decoded %d frames, index says %d", f, n, want)
		}
	}
	rs := e.rec.Ranges("door")
	if len(rs) != 1 || rs[0].To-rs[0].From < 1900 {
		t.Fatalf("ranges %+v, want one range of about 3 s", rs)
	}
}

// ffmpegFrames decodes an MP4 file with ffmpeg and counts the frames; any
// decoding error fails the test.
func ffmpegFrames(t *testing.T, path string) int {
	t.Helper()
	out, err := exec.Command("ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0",
		"-show_entries", "stream=nb_read_frames", "-of", "csv=p=0", path).CombinedOutput()
	if err != nil {
		t.Fatalf("ffprobe %s: %v\n%s", path, err, out)
	}
	var n int
	s := strings.TrimSpace(string(out))
	for _, c := range s {
		if c < '0' || c > '9' {
			t.Fatalf("ffprobe %s: %q", path, s)
		}
		n = n*10 + int(c-'0')
	}
	return n
}

func TestTornSegmentIsTruncated(t *testing.T) {
	frames := makeClip(t, 60)
	dir := t.TempDir()
	e := newCamEnv(t, dir, time.Hour) // one segment
	e.recordClip(t, frames, 60)
	files, _ := filepath.Glob(filepath.Join(dir, "door", "*.mp4"))
	if len(files) != 1 {
		t.Fatalf("%d files", len(files))
	}
	seg, err := openSegment(files[0])
	if err != nil || len(seg.Frags) < 2 {
		t.Fatalf("segment: %v, %d fragments", err, len(seg.Frags))
	}
	// Tear the last fragment in the middle, as a kill during its write would,
	// and lose the index (it is written only when a segment closes).
	last := seg.Frags[len(seg.Frags)-1]
	if err := os.Truncate(files[0], last.Off+last.Size/2); err != nil {
		t.Fatal(err)
	}
	os.Remove(indexPath(files[0]))
	st, err := OpenStore(dir, 0, 0, testLog())
	if err != nil {
		t.Fatal(err)
	}
	c := st.lookup("door")
	if c == nil || len(c.segs) != 1 || len(c.segs[0].Frags) != len(seg.Frags)-1 {
		t.Fatalf("after repair: %+v", c)
	}
	fi, _ := os.Stat(files[0])
	if fi.Size() != last.Off {
		t.Fatalf("torn segment is %d bytes, want %d (cut before the torn fragment)", fi.Size(), last.Off)
	}
	want := 0
	for _, fr := range c.segs[0].Frags {
		want += fr.N
	}
	if n := ffmpegFrames(t, files[0]); n != want {
		t.Fatalf("repaired file decodes %d frames, want %d", n, want)
	}
	// Garbage after a good prefix and a file with nothing but garbage.
	f, _ := os.OpenFile(files[0], os.O_APPEND|os.O_WRONLY, 0)
	f.Write([]byte("\x00\x00\x00\x10junkjunkjunkjunk\xff\xff"))
	f.Close()
	os.WriteFile(filepath.Join(dir, "door", "1.mp4"), []byte("not an mp4 at all"), 0o644)
	if _, err := OpenStore(dir, 0, 0, testLog()); err != nil {
		t.Fatal(err)
	}
	if n := ffmpegFrames(t, files[0]); n != want {
		t.Fatalf("after junk: decodes %d frames, want %d", n, want)
	}
}

func TestRetention(t *testing.T) {
	frames := makeClip(t, 90)
	dir := t.TempDir()
	e := newCamEnv(t, dir, time.Second)
	e.recordClip(t, frames, 90)
	st := e.rec.store
	c := st.lookup("door")
	n := len(c.segs)
	if n < 2 {
		t.Fatalf("%d segments", n)
	}
	total := st.TotalBytes()
	oldest := c.segs[0]
	// Size: the limit just below the total removes exactly the oldest segment.
	st.maxBytes = total - 1
	st.Prune(time.Now())
	if len(c.segs) != n-1 || c.segs[0] == oldest {
		t.Fatalf("size retention left %d of %d segments", len(c.segs), n)
	}
	if _, err := os.Stat(oldest.Path); !os.IsNotExist(err) {
		t.Fatal("pruned segment still on disk")
	}
	if _, err := os.Stat(indexPath(oldest.Path)); !os.IsNotExist(err) {
		t.Fatal("pruned segment's index still on disk")
	}
	// Age: an hour from now everything is too old.
	st.maxBytes = 0
	st.maxAge = time.Minute
	st.Prune(time.Now())
	if len(c.segs) != n-1 {
		t.Fatal("age retention removed recent segments")
	}
	st.Prune(time.Now().Add(time.Hour))
	if len(c.segs) != 0 || len(st.Ranges("door")) != 0 {
		t.Fatalf("age retention left %d segments", len(c.segs))
	}
}

// viewer joins the camera room and collects the frames its playback track
// carries (through the SFU publication, as a subscriber would get them) and
// the replies and events it receives.
type viewer struct {
	mu      sync.Mutex
	frames  []int // clip frame numbers, -1 for unknown frames
	replies [][]byte
	arrived chan struct{}
	asm     assembler
	lastTS  uint32
	lastSeq uint16
	haveSeq bool
	dups    int
	idx     map[[32]byte]int
}

func (v *viewer) WriteRTP(pkt *sfu.Packet) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.haveSeq && pkt.Header.SequenceNumber == v.lastSeq {
		v.dups++ // the tail probe: the burst's last packet again, as a receiver would drop it
		return
	}
	v.lastSeq, v.haveSeq = pkt.Header.SequenceNumber, true
	if pkt.Header.Timestamp != v.lastTS {
		v.asm.reset()
		v.lastTS = pkt.Header.Timestamp
	}
	_ = v.asm.push(pkt.Payload)
	if pkt.Header.Marker {
		n, ok := v.idx[hashOf(v.asm.buf)]
		if !ok {
			n = -1
		}
		v.frames = append(v.frames, n)
		v.asm.reset()
		select {
		case v.arrived <- struct{}{}:
		default:
		}
	}
}

func (v *viewer) take() []int {
	v.mu.Lock()
	defer v.mu.Unlock()
	f := v.frames
	v.frames = nil
	return f
}

func (v *viewer) lastReply() map[string]any {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.replies) == 0 {
		return nil
	}
	var m map[string]any
	_ = json.Unmarshal(v.replies[len(v.replies)-1], &m)
	return m
}

func (e *camEnv) joinViewer(t *testing.T, name string) *viewer {
	v := &viewer{arrived: make(chan struct{}, 1), idx: frameIndex(e.frames)}
	p, err := e.mgr.JoinLocal(sfu.LocalOptions{Room: "camera/door", Identity: name,
		Grants: auth.Grants{Subscribe: true, PublishData: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close("test over") })
	return v
}

// send sends a control message as the viewer and waits for its reply.
func (e *camEnv) send(t *testing.T, v *viewer, name, msg string) map[string]any {
	t.Helper()
	done := make(chan []byte, 1)
	e.rec.HandlePlayback("door", name, []byte(msg), func(b []byte) { done <- b })
	select {
	case b := <-done:
		v.mu.Lock()
		v.replies = append(v.replies, b)
		v.mu.Unlock()
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("reply %q: %v", b, err)
		}
		return m
	case <-time.After(10 * time.Second):
		t.Fatalf("no reply to %s", msg)
		return nil
	}
}

// attach hooks the viewer's sink to its playback track.
func (e *camEnv) attach(t *testing.T, v *viewer, name string) {
	e.rec.mu.Lock()
	s := e.rec.sessions[sessionKey{"door", name}]
	e.rec.mu.Unlock()
	if s == nil {
		t.Fatal("no session")
	}
	s.track.Publication().AddSink(v)
}

// settle waits until no frame arrived for a while.
func (v *viewer) settle() []int {
	for {
		select {
		case <-v.arrived:
		case <-time.After(400 * time.Millisecond):
			return v.take()
		}
	}
}

func TestSeekShowsExactFrame(t *testing.T) {
	frames := makeClip(t, 90)
	e := newCamEnv(t, t.TempDir(), time.Second)
	e.recordClip(t, frames, 90)
	got := recordedFrames(t, e.rec.store, "door")
	idx := frameIndex(frames)
	first := idx[hashOf(got[0].data)]

	v := e.joinViewer(t, "alice")
	// The first message opens the session; attach to its track, then seek.
	r := e.send(t, v, "alice", `{"id":1,"op":"pause"}`)
	if r["ok"] != true || r["identity"] != "playback-alice" {
		t.Fatalf("pause reply %v", r)
	}
	e.attach(t, v, "alice")
	// Opening the session paused may show the first frame; on a loaded
	// machine it can reach the track after the attach, and then the first
	// seek's burst read [0 0] (CI, 2026-11-27). Start from a quiet track.
	v.settle()
	// Targets: a keyframe, the frame before a keyframe, mid-GOP, between two
	// frame times (the earlier frame is on screen), the last frame.
	targets := []int{0, 29, 45, 46, 59, len(got) - 1}
	for _, k := range targets {
		at := int64(got[k].t / 90)
		if k == 46 {
			at = int64((got[k].t + 1500) / 90) // half a frame later: still frame k
		}
		r := e.send(t, v, "alice", `{"id":2,"op":"seek","t":`+strconvI(at)+`}`)
		if r["ok"] != true {
			t.Fatalf("seek to frame %d: %v", k, r)
		}
		shown := v.settle()
		if len(shown) == 0 {
			t.Fatalf("seek to frame %d: nothing sent", k)
		}
		want := first + k
		if shown[len(shown)-1] != want {
			t.Fatalf("seek to frame %d: last frame sent is clip frame %d, want %d (sent %v)", k, shown[len(shown)-1], want, shown)
		}
		// Decodable: the burst starts on a keyframe and has no holes.
		if !frames[shown[0]].key {
			t.Fatalf("seek to frame %d: burst starts on non-keyframe %d", k, shown[0])
		}
		for i := 1; i < len(shown); i++ {
			if shown[i] != shown[i-1]+1 {
				t.Fatalf("seek to frame %d: burst %v has a hole", k, shown)
			}
		}
		if int64(r["t"].(float64)) != int64(got[k].t/90) {
			t.Fatalf("seek reply t=%v, want %d", r["t"], got[k].t/90)
		}
	}
	// Step shows the next frame, one at a time.
	e.send(t, v, "alice", `{"id":3,"op":"seek","t":`+strconvI(int64(got[10].t/90))+`}`)
	v.settle()
	for i := 1; i <= 3; i++ {
		if r := e.send(t, v, "alice", `{"id":4,"op":"step"}`); r["ok"] != true {
			t.Fatalf("step: %v", r)
		}
		if s := v.settle(); len(s) != 1 || s[0] != first+10+i {
			t.Fatalf("step %d sent %v, want [%d]", i, s, first+10+i)
		}
	}
	// Play at 4x: keyframes only, then the end of the recording.
	e.send(t, v, "alice", `{"id":5,"op":"rate","rate":4}`)
	e.send(t, v, "alice", `{"id":6,"op":"play","from":`+strconvI(int64(got[0].t/90))+`}`)
	time.Sleep(1500 * time.Millisecond)
	played := v.settle()
	for _, n := range played[1:] {
		if n < 0 || !frames[n].key {
			t.Fatalf("4x playback sent non-keyframe %d (%v)", n, played)
		}
	}
	// Play at 1x from the start: every frame in order.
	e.send(t, v, "alice", `{"id":7,"op":"rate","rate":1}`)
	e.send(t, v, "alice", `{"id":8,"op":"play","from":`+strconvI(int64(got[0].t/90))+`}`)
	time.Sleep(700 * time.Millisecond)
	e.send(t, v, "alice", `{"id":9,"op":"pause"}`)
	played = v.settle()
	if len(played) < 5 {
		t.Fatalf("1x playback sent %v", played)
	}
	for i := 1; i < len(played); i++ {
		if played[i] != played[i-1]+1 {
			t.Fatalf("1x playback skipped: %v", played)
		}
	}
}

func strconvI(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestPlaybackControlErrors(t *testing.T) {
	frames := makeClip(t, 45)
	e := newCamEnv(t, t.TempDir(), time.Second)
	e.recordClip(t, frames, 45)
	rs := e.rec.Ranges("door")
	if len(rs) == 0 {
		t.Fatal("nothing recorded")
	}
	v := e.joinViewer(t, "bob")
	cases := []struct{ msg, err string }{
		{`{"id":1,"op":`, "bad JSON"},
		{`[1,2]`, "bad JSON"},
		{`{"id":2,"op":"fly"}`, "unknown op"},
		{`{"id":3,"op":"seek"}`, "seek needs t"},
		{`{"id":4,"op":"seek","t":1000}`, "no recording at 1000"},
		{`{"id":5,"op":"seek","t":` + strconvI(rs[0].To+60000) + `}`, "no recording at"},
		{`{"id":6,"op":"rate","rate":16}`, "rate must be between 0.25 and 8"},
		{`{"id":7,"op":"rate","rate":0.1}`, "rate must be between"},
		{`{"id":8,"op":"rate"}`, "rate must be between"},
		{`{"id":9,"op":"play","from":-5}`, "no recording at"},
		{`{"id":"x","op":"seek","t":"soon"}`, "bad JSON"},
		{`{"id":10,"op":"seek","t":` + strconvI(rs[0].From) + `}` + strings.Repeat(" ", 5000), "larger than 4096"},
	}
	for _, c := range cases {
		r := e.send(t, v, "bob", c.msg)
		msg, _ := r["error"].(string)
		if !strings.Contains(msg, c.err) {
			t.Fatalf("%.60s: reply %v, want error containing %q", c.msg, r, c.err)
		}
	}
	if r := e.send(t, v, "bob", `{"id":11,"op":"seek","t":`+strconvI(rs[0].From)+`}`); r["ok"] != true || r["id"] != float64(11) {
		t.Fatalf("valid seek after errors: %v", r)
	}
	// Another camera with no recordings, and a viewer not in the room.
	done := make(chan []byte, 1)
	e.rec.HandlePlayback("garage", "bob", []byte(`{"id":1,"op":"play"}`), func(b []byte) { done <- b })
	if b := <-done; !strings.Contains(string(b), "no recordings") {
		t.Fatalf("unknown camera: %s", b)
	}
	e.rec.HandlePlayback("door", "mallory", []byte(`{"id":1,"op":"play"}`), func(b []byte) { done <- b })
	if b := <-done; !strings.Contains(string(b), "not in room") {
		t.Fatalf("viewer outside the room: %s", b)
	}
	_ = webrtc.MimeTypeH264
}
