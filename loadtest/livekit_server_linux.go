package loadtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// LiveKitOptions place a LiveKit server on one address.
type LiveKitOptions struct {
	Addr     string // the only address it listens on and offers in candidates
	Port     int    // signalling (HTTP/WebSocket)
	UDPFrom  int    // media: one UDP socket per peer connection in [UDPFrom, UDPTo]
	UDPTo    int
	Key      string // API key and secret (with Dev and no Key: devkey/secret)
	Secret   string
	Dev      bool   // --dev: development keys and debug logging
	NS       *NetNS // run inside this namespace (nil: here)
	LogLevel string // without Dev; "warn" if empty
}

// StartLiveKit starts livekit-server (bin) with a configuration that keeps
// all of its traffic on o.Addr: signalling on Addr:Port, media on the UDP
// range of Addr only, no ICE over TCP, no TURN, and no external address
// discovery (use_external_ip false, node_ip Addr: it never asks a STUN
// server).
func StartLiveKit(bin string, o LiveKitOptions) (*Server, error) {
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("livekit-server: %w", err)
	}
	ip := net.ParseIP(o.Addr)
	if ip == nil || ip.To4() == nil {
		return nil, fmt.Errorf("livekit address %q: want an IPv4 address", o.Addr)
	}
	if o.Port == 0 || o.UDPFrom == 0 || o.UDPTo < o.UDPFrom {
		return nil, errors.New("livekit: a signalling port and a UDP range are needed")
	}
	dir, err := os.MkdirTemp("", "petrel-livekit-")
	if err != nil {
		return nil, err
	}
	level := o.LogLevel
	if level == "" {
		level = "warn"
	}
	conf := fmt.Sprintf(`port: %d
bind_addresses: ["%s"]
rtc:
  tcp_port: 0
  port_range_start: %d
  port_range_end: %d
  use_external_ip: false
  node_ip: %s
  enable_loopback_candidate: %v
  ips:
    includes: ["%s/32"]
turn:
  enabled: false
`, o.Port, o.Addr, o.UDPFrom, o.UDPTo, o.Addr, ip.IsLoopback(), o.Addr)
	if !o.Dev {
		conf += "logging:\n  level: " + level + "\n"
	}
	if o.Key != "" {
		conf += "keys:\n  " + strconv.Quote(o.Key) + ": " + strconv.Quote(o.Secret) + "\n"
	}
	cfgPath := filepath.Join(dir, "livekit.yaml")
	if err := os.WriteFile(cfgPath, []byte(conf), 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	logPath := filepath.Join(dir, "livekit.log")
	lf, err := os.Create(logPath)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	args := []string{"--config", cfgPath, "--bind", o.Addr}
	if o.Dev {
		args = append(args, "--dev")
	}
	ctx, cancel := context.WithCancel(context.Background())
	var cmd *exec.Cmd
	if o.NS != nil {
		cmd = o.NS.Command(ctx, bin, args...)
	} else {
		cmd = exec.CommandContext(ctx, bin, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
		cmd.WaitDelay = 5 * time.Second
	}
	cmd.Dir = dir
	// Its own environment only: LIVEKIT_* or NODE_IP from the caller's
	// would override the file.
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		cancel()
		lf.Close()
		os.RemoveAll(dir)
		return nil, err
	}
	addr := net.JoinHostPort(o.Addr, strconv.Itoa(o.Port))
	s := &Server{Cmd: cmd, URL: "http://" + addr, Dir: dir, Log: logPath, stop: cancel, closeLog: func() { lf.Close() }}
	if err := waitTCP(addr, 20*time.Second); err != nil {
		tail := s.LogTail()
		s.Stop()
		return nil, fmt.Errorf("livekit did not start: %v\n%s", err, tail)
	}
	return s, nil
}
