// Package redistest runs Debian's redis-server on a free port for a test.
package redistest

import (
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// Start runs redis-server with the listening arguments args gives
// for a free port on host (--port, or --tls-port and certificates).
func Start(t testing.TB, host string, args func(port int) []string) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server is not installed (scripts/install-deps.sh installs Debian's redis-server)")
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(bin, append(args(port), "--bind", host, "--save", "", "--appendonly", "no",
		"--dir", t.TempDir(), "--loglevel", "warning")...)
	// Its output goes to a file in the test directory (startup banners are noise).
	logf, err := os.Create(t.TempDir() + "/redis.log")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	for i := 0; i < 100; i++ {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("redis-server did not start")
	return ""
}
