// Package hostile attacks the real petrel binary as a client on the internet
// would, and asserts what a client sees and that the server stays healthy.
// Its harness (Main, Start) runs the binary for other packages' tests too.
package hostile

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/petrel-sfu/petrel/auth"
)

const apiKey = "hostilekey"

var apiSecret = strings.Repeat("h", 40)

// Binary is the petrel binary under test: PETREL_BIN, or one Main built.
var Binary string

// Main runs a package's tests against the real binary: the one PETREL_BIN
// names, or one built from this module for the run. Call it from TestMain.
func Main(m *testing.M) {
	Binary = os.Getenv("PETREL_BIN")
	var tmp string
	if Binary == "" {
		var err error
		if tmp, err = os.MkdirTemp("", "petrel-hostile"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		Binary = filepath.Join(tmp, "petrel")
		mod, err := exec.Command("go", "env", "GOMOD").Output()
		if err != nil {
			fmt.Fprintln(os.Stderr, "go env GOMOD:", err)
			os.Exit(1)
		}
		cmd := exec.Command("go", "build", "-o", Binary, "./cmd/petrel")
		cmd.Dir = filepath.Dir(strings.TrimSpace(string(mod)))
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build petrel:", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	if tmp != "" {
		os.RemoveAll(tmp)
	}
	os.Exit(code)
}

// Options change how the server starts.
type Options struct {
	Args []string // extra flags after the harness's own
	YAML string   // written to a file passed with --config
	Env  []string // extra environment, KEY=VALUE
}

// Server is one running petrel serve process on loopback.
type Server struct {
	URL, WS                    string
	HTTPPort, UDPPort, TCPPort int
	TURNPort                   int
	Dir                        string
	Keys                       auth.Keys
	APIKey                     string

	t    *testing.T
	opt  Options
	cmd  *exec.Cmd
	logs *syncBuffer
	done chan struct{}
}

// Start runs the binary with --loopback on free ports; it is stopped when
// the test ends.
func Start(t *testing.T, opt Options) *Server {
	t.Helper()
	s := &Server{t: t, opt: opt, Dir: t.TempDir(), Keys: auth.Keys{apiKey: apiSecret}, APIKey: apiKey,
		logs: &syncBuffer{}}
	s.HTTPPort, s.TURNPort = freeBoth(t), freeBoth(t)
	s.UDPPort, s.TCPPort = freeBoth(t), freeBoth(t)
	s.URL = "http://127.0.0.1:" + strconv.Itoa(s.HTTPPort)
	s.WS = "ws://127.0.0.1:" + strconv.Itoa(s.HTTPPort) + "/v1/rtc"
	s.start(t)
	t.Cleanup(s.stop)
	return s
}

func (s *Server) start(t *testing.T) {
	t.Helper()
	args := []string{"serve", "--loopback",
		"--http", "127.0.0.1:" + strconv.Itoa(s.HTTPPort),
		"--rtc-udp-port", strconv.Itoa(s.UDPPort),
		"--rtc-tcp-port", strconv.Itoa(s.TCPPort),
		"--turn-port", strconv.Itoa(s.TURNPort),
		"--api-key", apiKey}
	if s.opt.YAML != "" {
		path := filepath.Join(s.Dir, "petrel.yaml")
		if err := os.WriteFile(path, []byte(s.opt.YAML), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--config", path)
	}
	args = append(args, s.opt.Args...)
	cmd := exec.Command(Binary, args...)
	cmd.Dir = s.Dir
	cmd.Env = append(os.Environ(), "PETREL_API_SECRET="+apiSecret, "HOME="+s.Dir)
	cmd.Env = append(cmd.Env, s.opt.Env...)
	cmd.Stdout = io.Discard
	cmd.Stderr = s.logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start petrel: %v", err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(s.done)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-s.done:
			t.Fatalf("petrel exited at start: %s\n%s", cmd.ProcessState, s.Logs())
		default:
		}
		if resp, err := http.Get(s.URL + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("petrel did not answer /healthz in 20 s\n%s", s.Logs())
}

func (s *Server) stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	if s.t.Failed() || os.Getenv("PETREL_TEST_LOG") != "" {
		s.t.Logf("server log:\n%s", tail(s.Logs(), 8000))
	}
}

// Restart kills the server as a crash would and starts it again on the same
// ports with the same options.
func (s *Server) Restart(t *testing.T) {
	t.Helper()
	_ = s.cmd.Process.Kill()
	<-s.done
	s.start(t)
}

// PID is the server process's id.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Token signs a token for identity in room with grants g, valid for an hour.
func (s *Server) Token(t *testing.T, room, identity string, g auth.Grants) string {
	t.Helper()
	c := auth.Claims{Room: room, Grants: g, RegisteredClaims: jwt.RegisteredClaims{Subject: identity}}
	tok, err := s.Keys.Sign(apiKey, c, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// Healthy fails the test unless /healthz answers 200.
func (s *Server) Healthy(t *testing.T) {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(s.URL + "/healthz")
	if err != nil {
		t.Fatalf("healthz: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz: %s", resp.Status)
	}
}

// RSS is the server's resident set size in bytes.
func (s *Server) RSS(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.PID()))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// Goroutines is the server's goroutine count from its /metrics.
func (s *Server) Goroutines(t *testing.T) int {
	t.Helper()
	v, ok := s.Metric(t, "go_goroutines")
	if !ok {
		t.Fatal("no go_goroutines in /metrics")
	}
	return int(v)
}

// Metric reads one unlabelled sample (or the first with that name) from /metrics.
func (s *Server) Metric(t *testing.T, name string) (float64, bool) {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(s.URL + "/metrics")
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("metrics: %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		f := strings.Fields(rest)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			return v, true
		}
	}
	return 0, false
}

// OpenFiles counts the server's open file descriptors.
func (s *Server) OpenFiles(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", s.PID()))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// Logs is everything the server wrote to stderr (JSON lines).
func (s *Server) Logs() string { return s.logs.String() }

// WaitLog waits until the log contains substr.
func (s *Server) WaitLog(t *testing.T, substr string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if strings.Contains(s.Logs(), substr) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no %q in the server log within %s", substr, d)
}

// freeBoth returns a loopback port that is free for both TCP and UDP (the
// HTTP port also carries WebTransport over UDP, TURN listens on both).
func freeBoth(t *testing.T) int {
	t.Helper()
	for i := 0; i < 50; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(port))
		ln.Close()
		if err == nil {
			u.Close()
			return port
		}
	}
	t.Fatal("no port free for both TCP and UDP")
	return 0
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
