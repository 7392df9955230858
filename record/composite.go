package record

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/petrel-sfu/petrel/protocol"
)

// A composite is one video of a room recording: the video tracks in a grid
// (each scaled into a cell, black before it starts), the audio tracks mixed,
// rendered by an ffmpeg subprocess from the recording's one-file export, as a
// job with progress and cancel. It never runs on the live path.

// Composite cells and encoding: small cells keep a job cheap; the grid is as
// square as the number of video tracks allows.
const (
	cellW, cellH = 640, 360
	compositeFPS = 25
)

// CompositeJob is the state of a recording's composite.
type CompositeJob struct {
	Recording string  `json:"recording"`
	State     string  `json:"state"` // running, done, failed, canceled
	Progress  float64 `json:"progress"`
	Error     string  `json:"error,omitempty"`
	Size      int64   `json:"size,omitempty"` // bytes of the file once done
	Started   int64   `json:"started"`        // Unix ms
	Finished  int64   `json:"finished,omitempty"`
}

type compositeJob struct {
	mu     sync.Mutex
	job    CompositeJob
	cancel context.CancelFunc
	done   chan struct{}
}

func (j *compositeJob) snapshot() CompositeJob {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.job
}

// SetFFmpeg names the ffmpeg binary composites run ("ffmpeg": from PATH).
func (r *Recorder) SetFFmpeg(path string) {
	r.mu.Lock()
	r.ffmpeg = path
	r.mu.Unlock()
}

func compositePath(rr *roomRec) string { return filepath.Join(rr.dir, "composite.mp4") }

// StartComposite starts rendering recording id's composite; a job already
// running answers its state.
func (r *Recorder) StartComposite(id string) (CompositeJob, error) {
	rr, err := r.roomRecording(id)
	if err != nil {
		return CompositeJob{}, err
	}
	r.mu.Lock()
	bin := r.ffmpeg
	if j := r.composites[id]; j != nil && j.snapshot().State == "running" {
		r.mu.Unlock()
		return j.snapshot(), nil
	}
	r.mu.Unlock()
	if bin == "" {
		bin = "ffmpeg"
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		return CompositeJob{}, protocol.Errorf(CodeUnavailable, "composites need ffmpeg, which is not installed here (%s: %v)", bin, err)
	}
	info := rr.snapshot()
	if info.Active {
		return CompositeJob{}, protocol.Errorf(protocol.CodeBadRequest, "recording %q is still recording: stop it first", id)
	}
	ctx, cancel := context.WithCancel(context.Background())
	j := &compositeJob{job: CompositeJob{Recording: id, State: "running", Started: time.Now().UnixMilli()}, cancel: cancel, done: make(chan struct{})}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		cancel()
		return CompositeJob{}, errors.New("recording is shutting down")
	}
	r.composites[id] = j
	r.mu.Unlock()
	go func() {
		defer close(j.done)
		err := r.renderComposite(ctx, path, rr, info, j)
		j.mu.Lock()
		j.job.Finished = time.Now().UnixMilli()
		switch {
		case ctx.Err() != nil:
			j.job.State, j.job.Error = "canceled", ""
		case err != nil:
			j.job.State, j.job.Error = "failed", err.Error()
		default:
			j.job.State, j.job.Progress = "done", 1
			if st, err := os.Stat(compositePath(rr)); err == nil {
				j.job.Size = st.Size()
			}
		}
		state := j.job.State
		j.mu.Unlock()
		r.log.Info("room composite", "recording", id, "state", state, "err", err)
	}()
	r.log.Info("room composite started", "recording", id)
	return j.snapshot(), nil
}

// Composite is the state of recording id's composite job.
func (r *Recorder) Composite(id string) (CompositeJob, error) {
	if _, err := r.roomRecording(id); err != nil {
		return CompositeJob{}, err
	}
	r.mu.Lock()
	j := r.composites[id]
	r.mu.Unlock()
	if j == nil {
		return CompositeJob{}, protocol.Errorf(protocol.CodeNotFound, "recording %q has no composite", id)
	}
	return j.snapshot(), nil
}

// CancelComposite stops a running job (or forgets a finished one) and
// deletes its file.
func (r *Recorder) CancelComposite(id string) (CompositeJob, error) {
	rr, err := r.roomRecording(id)
	if err != nil {
		return CompositeJob{}, err
	}
	r.mu.Lock()
	j := r.composites[id]
	delete(r.composites, id)
	r.mu.Unlock()
	if j == nil {
		return CompositeJob{}, protocol.Errorf(protocol.CodeNotFound, "recording %q has no composite", id)
	}
	j.cancel()
	<-j.done
	_ = os.Remove(compositePath(rr))
	return j.snapshot(), nil
}

// compositeFile is the finished composite's path.
func (r *Recorder) compositeFile(id string) (string, error) {
	rr, err := r.roomRecording(id)
	if err != nil {
		return "", err
	}
	r.mu.Lock()
	j := r.composites[id]
	r.mu.Unlock()
	if j == nil || j.snapshot().State != "done" {
		return "", protocol.Errorf(protocol.CodeNotFound, "recording %q has no finished composite", id)
	}
	return compositePath(rr), nil
}

// renderComposite writes the one-file export to a temporary file and has
// ffmpeg render the grid from it, reading its progress.
func (r *Recorder) renderComposite(ctx context.Context, ffmpeg string, rr *roomRec, info RoomRecording, j *compositeJob) error {
	src := filepath.Join(rr.dir, "composite-src.mp4.tmp")
	out := filepath.Join(rr.dir, "composite.mp4.tmp")
	defer os.Remove(src)
	defer os.Remove(out)
	f, err := os.Create(src)
	if err != nil {
		return err
	}
	err = r.ExportRoom(info.ID, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	// Each track's offset from the recording's first sample, as the export
	// counts time, and the whole length.
	var base, end int64 = math.MaxInt64, 0
	type tr struct {
		video bool
		off   float64
	}
	var tracks []tr
	for _, t := range info.Tracks {
		if len(t.Ranges) == 0 || rr.store.lookup(t.Key) == nil {
			continue
		}
		base = min(base, t.Ranges[0].From)
		end = max(end, t.Ranges[len(t.Ranges)-1].To)
		tracks = append(tracks, tr{video: t.Kind == "video", off: float64(t.Ranges[0].From)})
	}
	if len(tracks) == 0 {
		return errors.New("nothing recorded")
	}
	total := float64(end-base) / 1000
	var graph []string
	var vs, as []string
	nv, na := 0, 0
	for _, t := range tracks {
		off := (t.off - float64(base)) / 1000
		if t.video {
			graph = append(graph, fmt.Sprintf("[0:v:%d]setpts=PTS-STARTPTS,scale=%d:%d:force_original_aspect_ratio=decrease,pad=%d:%d:(ow-iw)/2:(oh-ih)/2,setsar=1,fps=%d,tpad=start_duration=%.3f:color=black[v%d]",
				nv, cellW, cellH, cellW, cellH, compositeFPS, off, nv))
			vs = append(vs, fmt.Sprintf("[v%d]", nv))
			nv++
		} else {
			graph = append(graph, fmt.Sprintf("[0:a:%d]aresample=48000:async=1,asetpts=PTS-STARTPTS,adelay=%d:all=1[a%d]", na, int(off*1000), na))
			as = append(as, fmt.Sprintf("[a%d]", na))
			na++
		}
	}
	args := []string{"-hide_banner", "-nostdin", "-v", "error", "-y", "-i", src}
	var maps []string
	switch {
	case nv == 1:
		graph = append(graph, "[v0]null[vout]")
	case nv > 1:
		cols := int(math.Ceil(math.Sqrt(float64(nv))))
		var layout []string
		for i := 0; i < nv; i++ {
			layout = append(layout, fmt.Sprintf("%d_%d", i%cols*cellW, i/cols*cellH))
		}
		graph = append(graph, fmt.Sprintf("%sxstack=inputs=%d:layout=%s:fill=black[vout]", strings.Join(vs, ""), nv, strings.Join(layout, "|")))
	}
	if nv > 0 {
		maps = append(maps, "-map", "[vout]", "-c:v", "libx264", "-preset", "veryfast", "-crf", "28", "-pix_fmt", "yuv420p")
	}
	switch {
	case na == 1:
		graph = append(graph, "[a0]anull[aout]")
	case na > 1:
		graph = append(graph, fmt.Sprintf("%samix=inputs=%d:duration=longest:normalize=0[aout]", strings.Join(as, ""), na))
	}
	if na > 0 {
		maps = append(maps, "-map", "[aout]", "-c:a", "aac", "-b:a", "96k")
	}
	args = append(args, "-filter_complex", strings.Join(graph, ";"))
	args = append(args, maps...)
	args = append(args, "-t", strconv.FormatFloat(total, 'f', 3, 64), "-movflags", "+faststart", "-progress", "pipe:1", "-nostats", "-f", "mp4", out)
	cmd := exec.CommandContext(ctx, ffmpeg, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr strings.Builder
	cmd.Stderr = &limitedWriter{w: &stderr, n: 4096}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("ffmpeg: %w", err)
	}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "out_time_us="); ok {
			if us, err := strconv.ParseInt(v, 10, 64); err == nil && total > 0 {
				j.mu.Lock()
				j.job.Progress = min(0.99, max(0, float64(us)/1e6/total))
				j.mu.Unlock()
			}
		}
	}
	if err := cmd.Wait(); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("ffmpeg: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	return os.Rename(out, compositePath(rr))
}

// limitedWriter keeps the first n bytes (ffmpeg's error text).
type limitedWriter struct {
	w interface{ WriteString(string) (int, error) }
	n int
}

func (l *limitedWriter) Write(b []byte) (int, error) {
	if l.n > 0 {
		k := min(len(b), l.n)
		_, _ = l.w.WriteString(string(b[:k]))
		l.n -= k
	}
	return len(b), nil
}

func (r *Recorder) closeComposites() {
	r.mu.Lock()
	js := make([]*compositeJob, 0, len(r.composites))
	for _, j := range r.composites {
		js = append(js, j)
	}
	r.mu.Unlock()
	for _, j := range js {
		j.cancel()
		<-j.done
	}
}
