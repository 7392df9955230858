package record

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestClosedSegmentsAreDurable: a kill -9 keeps what the page cache holds, a
// power loss only what was synced. The recorder runs under strace (as in the
// crash test, a child process), and for every closed segment the file and its
// index are synced before the index's rename, and the directory after it, so
// that everything up to the last closed segment survives a power loss.
func TestClosedSegmentsAreDurable(t *testing.T) {
	strace, err := exec.LookPath("strace")
	if err != nil {
		t.Skip("strace not installed")
	}
	frames := makeClip(t, 60)
	clip := filepath.Join(t.TempDir(), "clip.h264")
	if err := os.WriteFile(clip, annexB(frames), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	trace := filepath.Join(t.TempDir(), "trace")
	cmd := exec.Command(strace, "-f", "-qq", "-y", "-o", trace,
		"-e", "trace=fsync,fdatasync,rename,renameat,renameat2", "-e", "signal=none", os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "PETREL_RECORD_CHILD="+dir, "PETREL_RECORD_CLIP="+clip)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// strace and the recorder it runs are one process group: end both.
	stop := func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() }
	defer stop()
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "recording" {
		t.Fatalf("child: %q", line)
	}
	segDir := filepath.Join(dir, "yard")
	deadline := time.Now().Add(30 * time.Second)
	var closed []string
	for {
		closed, _ = filepath.Glob(filepath.Join(segDir, "*.idx"))
		if len(closed) >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d segments closed in 30 s", len(closed))
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Let the last rename's directory sync land in the trace.
	time.Sleep(200 * time.Millisecond)
	stop()

	b, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	calls := strings.Split(string(b), "\n")
	// find is the first call at or after from matching re, or -1.
	find := func(from int, re *regexp.Regexp) int {
		for i := max(from, 0); i < len(calls); i++ {
			if re.MatchString(calls[i]) {
				return i
			}
		}
		return -1
	}
	q := regexp.QuoteMeta
	for _, idx := range closed {
		seg := strings.TrimSuffix(idx, ".idx") + ".mp4"
		rename := find(0, regexp.MustCompile(`rename.*"`+q(idx+".tmp")+`".*"`+q(idx)+`".*= 0`))
		if rename < 0 {
			t.Fatalf("no rename of %s.tmp in the trace", idx)
		}
		segSync := find(0, regexp.MustCompile(`f(data)?sync\(\d+<`+q(seg)+`>\) = 0`))
		tmpSync := find(0, regexp.MustCompile(`f(data)?sync\(\d+<`+q(idx+".tmp")+`>\) = 0`))
		dirSync := find(rename, regexp.MustCompile(`f(data)?sync\(\d+<`+q(segDir)+`>\) = 0`))
		if segSync < 0 || segSync > rename {
			t.Errorf("%s: the segment is not synced before its index is renamed", filepath.Base(seg))
		}
		if tmpSync < 0 || tmpSync > rename {
			t.Errorf("%s: the index is not synced before its rename", filepath.Base(idx))
		}
		if dirSync < 0 {
			t.Errorf("%s: the directory is not synced after the rename", filepath.Base(idx))
		}
	}
	// The camera's directory itself is an entry of the recording directory.
	if find(0, regexp.MustCompile(`f(data)?sync\(\d+<`+q(dir)+`>\) = 0`)) < 0 {
		t.Errorf("the recording directory is never synced after the camera's directory was made")
	}
	if t.Failed() {
		t.Logf("trace:\n%s", b)
	}
}
