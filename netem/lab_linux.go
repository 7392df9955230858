package netem

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Prefix starts the name of every namespace this package creates, so that
// Cleanup can find leftovers of crashed runs.
const Prefix = "petrel-"

// StateDir holds one file per running lab with the pid of the process that
// owns it; Cleanup leaves labs of live owners alone.
const StateDir = "/run/petrel-netem"

// Addresses of the two hosts. Every lab lives in its own pair of namespaces,
// so labs can run side by side with the same addresses.
var (
	AddrA = netip.MustParseAddr("10.201.0.1")
	AddrB = netip.MustParseAddr("10.201.0.2")
)

// Host is one end of the lab: a network namespace with a TUN device "tun0"
// whose only peer is the other host.
type Host struct {
	Label string     // "a" or "b"
	NS    string     // namespace name
	Addr  netip.Addr // this host's address
	Peer  netip.Addr // the other host's address
}

// Command prepares a command that runs inside the host's namespace.
func (h *Host) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", h.NS, name}, args...)...)
	cmd.Env = append(os.Environ(),
		"PETREL_NETEM_HOST="+h.Label,
		"PETREL_NETEM_ADDR="+h.Addr.String(),
		"PETREL_NETEM_PEER="+h.Peer.String())
	// Kill the whole process group on cancel: ip exec()s into the command,
	// but the command may have children of its own.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	return cmd
}

// Do runs f on an OS thread switched into the host's namespace. Sockets
// opened by f (synchronously, with IP literals) stay in that namespace.
func (h *Host) Do(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// If switching back fails the thread stays locked and dies with
		// this goroutine, so no other goroutine runs in the wrong namespace.
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("open own netns: %w", err)
			return
		}
		defer unix.Close(orig)
		target, err := unix.Open(filepath.Join("/run/netns", h.NS), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("open netns %s: %w", h.NS, err)
			return
		}
		defer unix.Close(target)
		if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("enter netns %s: %w", h.NS, err)
			return
		}
		ferr := f()
		if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("leave netns %s: %w", h.NS, err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// Options configure NewLab.
type Options struct {
	// Name makes the namespaces petrel-<Name>-a and -b. Default: <pid>-<n>.
	Name string
	Spec Spec
	// Seed makes loss, duplication and jitter reproducible. 0 picks one.
	Seed uint64
	// MaxPackets bounds buffers in flight per direction (default 32768,
	// 64 MiB): enough for 1 Gbit/s × 250 ms.
	MaxPackets int
	// NoRealtime keeps the forwarding threads at normal priority. By
	// default they run SCHED_FIFO, as kernel netem runs ahead of processes.
	NoRealtime bool
}

// Lab is two network namespaces joined by the emulator.
type Lab struct {
	Name   string
	A, B   *Host
	ab, ba *direction
	fds    []int

	closeOnce sync.Once
	closeErr  error
	scriptMu  sync.Mutex
	cancelScr context.CancelFunc
}

var labCounter atomic.Int64

// Available reports why labs cannot be created here, or nil.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("netem lab needs root (network namespaces and TUN devices)")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		return fmt.Errorf("netem lab needs /dev/net/tun: %w", err)
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("netem lab needs the ip command (iproute2)")
	}
	return nil
}

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// NewLab creates the namespaces, the TUN devices and the two forwarding
// goroutines. Close tears all of it down; if the process dies instead, the
// TUN devices vanish with it and Cleanup removes the namespaces.
func NewLab(o Options) (_ *Lab, err error) {
	if err := Available(); err != nil {
		return nil, err
	}
	if o.Name == "" {
		o.Name = fmt.Sprintf("%d-%d", os.Getpid(), labCounter.Add(1))
	}
	if strings.ContainsAny(o.Name, "/ \t") || len(o.Name) > 40 {
		return nil, fmt.Errorf("bad lab name %q", o.Name)
	}
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano())
	}
	l := &Lab{
		Name: o.Name,
		A:    &Host{Label: "a", NS: Prefix + o.Name + "-a", Addr: AddrA, Peer: AddrB},
		B:    &Host{Label: "b", NS: Prefix + o.Name + "-b", Addr: AddrB, Peer: AddrA},
	}
	if err := os.MkdirAll(StateDir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(l.stateFile(), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			l.Close()
		}
	}()
	tun := [2]int{-1, -1}
	for i, h := range []*Host{l.A, l.B} {
		if err := ipCmd("netns", "add", h.NS); err != nil {
			return nil, fmt.Errorf("create lab %s: %w", o.Name, err)
		}
		if err := h.Do(func() error {
			fd, err := openTUN("tun0")
			tun[i] = fd
			return err
		}); err != nil {
			return nil, fmt.Errorf("create TUN in %s: %w", h.NS, err)
		}
		l.fds = append(l.fds, tun[i])
		for _, args := range [][]string{
			{"-n", h.NS, "link", "set", "lo", "up"},
			{"-n", h.NS, "link", "set", "tun0", "mtu", strconv.Itoa(MTU), "txqueuelen", "1000", "up"},
			{"-n", h.NS, "addr", "add", h.Addr.String(), "peer", h.Peer.String() + "/32", "dev", "tun0"},
			// Firefox gathers no host candidate on a host without a
			// default route; the emulator drops what is not for the peer.
			{"-n", h.NS, "route", "add", "default", "dev", "tun0"},
		} {
			if err := ipCmd(args...); err != nil {
				return nil, err
			}
		}
		// IPv6 would only add router solicitations to the measured link.
		_ = exec.Command("ip", "netns", "exec", h.NS, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1").Run()
	}
	base := time.Now()
	if l.ab, err = newDirection("a->b", tun[0], tun[1], o.Spec.AB, o.Seed, o.MaxPackets, base); err != nil {
		return nil, err
	}
	if l.ba, err = newDirection("b->a", tun[1], tun[0], o.Spec.BA, o.Seed+1, o.MaxPackets, base); err != nil {
		return nil, err
	}
	l.ab.realtime, l.ba.realtime = !o.NoRealtime, !o.NoRealtime
	// Each forwarding goroutine is locked to its thread; when it returns
	// from ppoll it needs a P at once, not after the rest of the process
	// has had its turn.
	if want := runtime.NumCPU() + 2; runtime.GOMAXPROCS(0) < want {
		runtime.GOMAXPROCS(want)
	}
	go l.ab.run()
	go l.ba.run()
	return l, nil
}

func (l *Lab) stateFile() string { return filepath.Join(StateDir, l.Name+".pid") }

// Set replaces the impairment of both directions now.
func (l *Lab) Set(s Spec) {
	l.ab.set(s.AB)
	l.ba.set(s.BA)
}

// SetAB and SetBA replace one direction's impairment now.
func (l *Lab) SetAB(p Params) { l.ab.set(p) }
func (l *Lab) SetBA(p Params) { l.ba.set(p) }

// Spec returns the impairment in force.
func (l *Lab) Spec() Spec { return Spec{AB: *l.ab.params.Load(), BA: *l.ba.params.Load()} }

// Stats returns the counters of both directions.
func (l *Lab) Stats() (ab, ba Stats) { return l.ab.snapshot(), l.ba.snapshot() }

// Play runs a script in the background, starting now; a new Play or Close
// stops the previous one. onStep, if set, is called after each step.
func (l *Lab) Play(s Script, onStep func(Step)) {
	l.scriptMu.Lock()
	defer l.scriptMu.Unlock()
	if l.cancelScr != nil {
		l.cancelScr()
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.cancelScr = cancel
	start := time.Now()
	go func() {
		for _, st := range s {
			t := time.NewTimer(time.Until(start.Add(st.At)))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			if st.AB {
				l.ab.set(st.Params)
			}
			if st.BA {
				l.ba.set(st.Params)
			}
			if onStep != nil {
				onStep(st)
			}
		}
	}()
}

// Close stops forwarding, kills every process left in the namespaces and
// deletes them.
func (l *Lab) Close() error {
	l.closeOnce.Do(func() {
		l.scriptMu.Lock()
		if l.cancelScr != nil {
			l.cancelScr()
		}
		l.scriptMu.Unlock()
		for _, d := range []*direction{l.ab, l.ba} {
			if d != nil {
				d.close()
			}
		}
		for _, fd := range l.fds {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
		var errs []error
		for _, h := range []*Host{l.A, l.B} {
			errs = append(errs, removeNamespace(h.NS))
		}
		os.Remove(l.stateFile())
		l.closeErr = errors.Join(errs...)
	})
	return l.closeErr
}

// removeNamespace kills what runs inside ns and deletes it; a missing
// namespace is not an error.
func removeNamespace(ns string) error {
	if _, err := os.Stat(filepath.Join("/run/netns", ns)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	for range 50 {
		out, _ := exec.Command("ip", "netns", "pids", ns).Output()
		pids := strings.Fields(string(out))
		if len(pids) == 0 {
			break
		}
		for _, p := range pids {
			if pid, err := strconv.Atoi(p); err == nil && pid != os.Getpid() {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return ipCmd("netns", "del", ns)
}

// Leftover is a lab namespace found on the system.
type Leftover struct {
	Lab, NS string
	Owner   int  // pid from the state file, 0 if unknown
	Alive   bool // the owner is still running
}

// List finds the namespaces of every lab on the system.
func List() ([]Leftover, error) {
	ents, err := os.ReadDir("/run/netns")
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	var out []Leftover
	for _, e := range ents {
		n := e.Name()
		if !strings.HasPrefix(n, Prefix) || !(strings.HasSuffix(n, "-a") || strings.HasSuffix(n, "-b")) {
			continue
		}
		lo := Leftover{NS: n, Lab: strings.TrimSuffix(strings.TrimPrefix(n, Prefix), n[len(n)-2:])}
		if b, err := os.ReadFile(filepath.Join(StateDir, lo.Lab+".pid")); err == nil {
			lo.Owner, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		lo.Alive = lo.Owner > 0 && syscall.Kill(lo.Owner, 0) == nil
		out = append(out, lo)
	}
	return out, nil
}

// Cleanup removes the namespaces of labs whose owner is gone (all labs with
// all=true) and returns what it removed.
func Cleanup(all bool) ([]string, error) {
	ls, err := List()
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, lo := range ls {
		if lo.Alive && !all {
			continue
		}
		if lo.Alive && lo.Owner != os.Getpid() {
			syscall.Kill(lo.Owner, syscall.SIGTERM)
		}
		if err := removeNamespace(lo.NS); err != nil {
			errs = append(errs, err)
			continue
		}
		os.Remove(filepath.Join(StateDir, lo.Lab+".pid"))
		removed = append(removed, lo.NS)
	}
	return removed, errors.Join(errs...)
}

func openTUN(name string) (int, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return -1, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("TUNSETIFF %s: %w", name, err)
	}
	return fd, nil
}

// Exclusive takes a machine-wide lock for measurements that must not share
// the CPU with another lab's traffic: go test runs packages in parallel,
// and a data-channel benchmark beside a timing test spoils both. It waits
// up to wait (forever if wait <= 0); call release when done.
func Exclusive(wait time.Duration) (release func(), err error) {
	if err := os.MkdirAll(StateDir, 0o755); err != nil {
		return nil, err
	}
	fd, err := unix.Open(filepath.Join(StateDir, "measure.lock"), unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(wait)
	for {
		err = unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { unix.Close(fd) }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			unix.Close(fd)
			return nil, err
		}
		if wait > 0 && time.Now().After(deadline) {
			unix.Close(fd)
			return nil, ErrBusy
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ErrBusy: another measurement held the lock for longer than asked to wait.
var ErrBusy = errors.New("another lab measurement (a benchmark?) holds " + StateDir + "/measure.lock")
