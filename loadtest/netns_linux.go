package loadtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// NetNS is a network namespace joined to this one by a veth pair: servers that
// refuse loopback (Janus gathers no ICE candidates there) run inside it, and
// the generator reaches them over the pair. Nothing leaves the machine: the
// pair is a /30 of its own and no route or forwarding is added.
type NetNS struct {
	Name     string
	HostIf   string // veth end in this namespace
	HostAddr string // its address (the generator's Bind)
	NSAddr   string // the address inside the namespace
}

// NewNetNS creates namespace name ("petrel-load-…") with veth addresses
// 10.203.<n>.1 here and 10.203.<n>.2 inside.
func NewNetNS(name string, n int) (*NetNS, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, errors.New("the ip command (iproute2) is needed")
	}
	ns := &NetNS{Name: name, HostIf: fmt.Sprintf("plh%d", n), HostAddr: fmt.Sprintf("10.203.%d.1", n), NSAddr: fmt.Sprintf("10.203.%d.2", n)}
	nsIf := fmt.Sprintf("pln%d", n)
	// A leftover of a crashed run goes first.
	_ = exec.Command("ip", "netns", "del", name).Run()
	_ = exec.Command("ip", "link", "del", ns.HostIf).Run()
	steps := [][]string{
		{"netns", "add", name},
		{"link", "add", ns.HostIf, "type", "veth", "peer", "name", nsIf},
		{"link", "set", nsIf, "netns", name},
		{"addr", "add", ns.HostAddr + "/30", "dev", ns.HostIf},
		{"link", "set", ns.HostIf, "up"},
		{"-n", name, "addr", "add", ns.NSAddr + "/30", "dev", nsIf},
		{"-n", name, "link", "set", nsIf, "up"},
		{"-n", name, "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if out, err := exec.Command("ip", s...).CombinedOutput(); err != nil {
			ns.Close()
			return nil, fmt.Errorf("ip %s: %v: %s", strings.Join(s, " "), err, out)
		}
	}
	return ns, nil
}

// Command runs name inside the namespace (ip netns exec replaces itself with
// the command, so the process's PID is the command's).
func (n *NetNS) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.Name, name}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// Close removes the namespace and the pair.
func (n *NetNS) Close() {
	_ = exec.Command("ip", "link", "del", n.HostIf).Run()
	_ = exec.Command("ip", "netns", "del", n.Name).Run()
}

// Server is a media server process the benchmark started.
type Server struct {
	Cmd  *exec.Cmd
	URL  string // what Config.URL takes
	Dir  string
	Log  string
	stop func()

	closeLog func()
}

// PID of the server process.
func (s *Server) PID() int { return s.Cmd.Process.Pid }

// Stop ends the server and removes its files.
func (s *Server) Stop() {
	s.stop()
	_ = s.Cmd.Wait()
	if s.closeLog != nil {
		s.closeLog()
	}
	if s.Dir != "" {
		_ = os.RemoveAll(s.Dir)
	}
}

// LogTail is the end of the server's log.
func (s *Server) LogTail() string {
	b, _ := os.ReadFile(s.Log)
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

// StartJanus writes a Janus configuration (WebSocket API on the namespace
// address, EchoTest, VideoRoom and Streaming only, little logging) and starts
// Janus in ns. eventLoops > 0 sets event_loops (a fixed pool of loop threads
// instead of one thread per handle).
func StartJanus(ns *NetNS, eventLoops int) (*Server, error) {
	if _, err := exec.LookPath("janus"); err != nil {
		return nil, errors.New("janus is not installed (apt-get install janus)")
	}
	dir, err := os.MkdirTemp("", "petrel-janus-")
	if err != nil {
		return nil, err
	}
	loops := ""
	if eventLoops > 0 {
		loops = fmt.Sprintf("\tevent_loops = %d\n", eventLoops)
	}
	lib := "/usr/lib/x86_64-linux-gnu/janus"
	files := map[string]string{
		"janus.jcfg": `general: {
	configs_folder = "` + dir + `"
	plugins_folder = "` + lib + `/plugins"
	transports_folder = "` + lib + `/transports"
	events_folder = "` + lib + `/events"
	loggers_folder = "` + lib + `/loggers"
	debug_level = 3
	session_timeout = 120
` + loops + `}
media: {
	rtp_port_range = "20000-60000"
}
nat: {
	ice_enforce_list = "` + ns.NSAddr + `"
}
plugins: {
	disable = "libjanus_duktape.so,libjanus_lua.so,libjanus_nosip.so,libjanus_recordplay.so,libjanus_sip.so,libjanus_textroom.so,libjanus_videocall.so,libjanus_voicemail.so"
}
transports: {
	disable = "libjanus_http.so,libjanus_mqtt.so,libjanus_nanomsg.so,libjanus_pfunix.so,libjanus_rabbitmq.so"
}
events: {
	broadcast = false
}
loggers: {
	disable = "libjanus_jsonlog.so"
}
`,
		"janus.transport.websockets.jcfg": "general: {\n\tjson = \"plain\"\n\tws = true\n\tws_port = 8188\n\tws_ip = \"" + ns.NSAddr + "\"\n\twss = false\n}\nadmin: {\n\tadmin_ws = false\n}\n",
		"janus.plugin.echotest.jcfg":      "general: {\n}\n",
		"janus.plugin.videoroom.jcfg":     "general: {\n}\n",
		"janus.plugin.streaming.jcfg":     "general: {\n}\n",
		"janus.plugin.audiobridge.jcfg":   "general: {\n}\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			return nil, err
		}
	}
	logPath := filepath.Join(dir, "janus.log")
	ctx, cancel := context.WithCancel(context.Background())
	cmd := ns.Command(ctx, "janus", "-F", dir, "-C", filepath.Join(dir, "janus.jcfg"), "-N", "-L", logPath, "-o")
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, err
	}
	s := &Server{Cmd: cmd, URL: "ws://" + ns.NSAddr + ":8188", Dir: dir, Log: logPath, stop: cancel}
	if err := waitTCP(ns.NSAddr+":8188", 20*time.Second); err != nil {
		tail := s.LogTail()
		s.Stop()
		return nil, fmt.Errorf("janus did not start: %v\n%s", err, tail)
	}
	return s, nil
}

// StartPetrel starts `petrel serve` (bin) in ns on its namespace address, with
// an API key so the generator signs its own tokens.
func StartPetrel(bin string, ns *NetNS, key, secret string, extra ...string) (*Server, error) {
	dir, err := os.MkdirTemp("", "petrel-serve-")
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "petrel.log")
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	args := append([]string{"serve", "--http", ns.NSAddr + ":7880", "--rtc-udp-port", "7882", "--rtc-tcp-port", "-1",
		"--turn=false", "--api-key", key, "--log-level", "warn", "--max-participants", "5000",
		"--joins-per-second", "1000", "--joins-per-ip", "0", "--max-conns-per-ip", "0", "--messages-per-second", "1000"}, extra...)
	cmd := ns.Command(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "PETREL_API_SECRET="+secret)
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, err
	}
	s := &Server{Cmd: cmd, URL: "http://" + ns.NSAddr + ":7880", Dir: dir, Log: logPath, stop: cancel, closeLog: func() { lf.Close() }}
	if err := waitTCP(ns.NSAddr+":7880", 20*time.Second); err != nil {
		tail := s.LogTail()
		s.Stop()
		return nil, fmt.Errorf("petrel did not start: %v\n%s", err, tail)
	}
	return s, nil
}

func waitTCP(addr string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
