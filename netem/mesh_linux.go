package netem

import (
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
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A Mesh is several hosts (network namespaces) with an emulated link between
// each pair that needs one: the topology of a cluster (nodes in regions,
// clients beside them), where a Lab has two hosts. Each link is a pair of
// point-to-point TUN devices, "to-<peer label>" in each host, forwarded by
// the same per-direction emulator as a Lab's. Every host has one address
// (on each of its TUN devices) and reaches each linked peer through that
// peer's device only, so a packet crosses exactly one emulated link.

// MeshOptions configure NewMesh.
type MeshOptions struct {
	// Name makes the namespaces petrel-m<Name>-<label>. Default: the pid.
	Name string
	// Hosts are the labels, at most 12 characters each ([a-z0-9]).
	Hosts []string
	// Links lists the linked pairs and their impairment (AB from the
	// first label to the second). Hosts of a pair not listed cannot reach
	// each other.
	Links []MeshLink
	Seed  uint64
	// NoRealtime keeps the forwarding threads at normal priority (see Options).
	NoRealtime bool
}

// MeshLink is one emulated link of a mesh.
type MeshLink struct {
	A, B string
	Spec Spec
}

// Mesh is a running topology; Close tears it down.
type Mesh struct {
	Name  string
	Hosts map[string]*Host
	dirs  map[[2]string]*direction
	fds   []int

	closeOnce sync.Once
	closeErr  error
}

// meshPrefix tells mesh namespaces from a Lab's (Prefix + name + -a/-b).
const meshPrefix = Prefix + "m"

// MeshAddr is the address of the i-th host (0-based) of a mesh.
func MeshAddr(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 203, 0, byte(i + 1)}) }

// NewMesh creates the namespaces, the TUN pairs and the forwarding threads.
func NewMesh(o MeshOptions) (_ *Mesh, err error) {
	if err := Available(); err != nil {
		return nil, err
	}
	if o.Name == "" {
		o.Name = strconv.Itoa(os.Getpid())
	}
	if strings.ContainsAny(o.Name, "/ \t") || len(o.Name) > 30 {
		return nil, fmt.Errorf("bad mesh name %q", o.Name)
	}
	if len(o.Hosts) < 2 || len(o.Hosts) > 250 {
		return nil, fmt.Errorf("a mesh has 2 to 250 hosts, not %d", len(o.Hosts))
	}
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano())
	}
	cleanupMeshes()
	m := &Mesh{Name: o.Name, Hosts: map[string]*Host{}, dirs: map[[2]string]*direction{}}
	for i, label := range o.Hosts {
		if label == "" || len(label) > 12 || strings.Trim(label, "abcdefghijklmnopqrstuvwxyz0123456789") != "" {
			return nil, fmt.Errorf("bad mesh host label %q", label)
		}
		if m.Hosts[label] != nil {
			return nil, fmt.Errorf("mesh host %q twice", label)
		}
		m.Hosts[label] = &Host{Label: label, NS: meshPrefix + o.Name + "-" + label, Addr: MeshAddr(i)}
	}
	if err := os.MkdirAll(StateDir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(m.stateFile(), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			m.Close()
		}
	}()
	for _, label := range o.Hosts {
		h := m.Hosts[label]
		if err := ipCmd("netns", "add", h.NS); err != nil {
			return nil, fmt.Errorf("create mesh %s: %w", o.Name, err)
		}
		if err := ipCmd("-n", h.NS, "link", "set", "lo", "up"); err != nil {
			return nil, err
		}
		_ = exec.Command("ip", "netns", "exec", h.NS, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1").Run()
	}
	base := time.Now()
	seed := o.Seed
	for _, l := range o.Links {
		a, b := m.Hosts[l.A], m.Hosts[l.B]
		if a == nil || b == nil || a == b {
			return nil, fmt.Errorf("mesh link %s-%s: unknown or same hosts", l.A, l.B)
		}
		if m.dirs[[2]string{l.A, l.B}] != nil {
			return nil, fmt.Errorf("mesh link %s-%s twice", l.A, l.B)
		}
		var fd [2]int
		for i, pair := range [][2]*Host{{a, b}, {b, a}} {
			h, peer := pair[0], pair[1]
			dev := "to-" + peer.Label
			if err := h.Do(func() error {
				var err error
				fd[i], err = openTUN(dev)
				return err
			}); err != nil {
				return nil, fmt.Errorf("create TUN %s in %s: %w", dev, h.NS, err)
			}
			m.fds = append(m.fds, fd[i])
			for _, args := range [][]string{
				{"-n", h.NS, "link", "set", dev, "mtu", strconv.Itoa(MTU), "txqueuelen", "1000", "up"},
				{"-n", h.NS, "addr", "add", h.Addr.String(), "peer", peer.Addr.String() + "/32", "dev", dev},
			} {
				if err := ipCmd(args...); err != nil {
					return nil, err
				}
			}
		}
		ab, err := newDirection(l.A+"->"+l.B, fd[0], fd[1], l.Spec.AB, seed, 0, base)
		if err != nil {
			return nil, err
		}
		m.dirs[[2]string{l.A, l.B}] = ab
		ba, err := newDirection(l.B+"->"+l.A, fd[1], fd[0], l.Spec.BA, seed+1, 0, base)
		if err != nil {
			return nil, err
		}
		m.dirs[[2]string{l.B, l.A}] = ba
		seed += 2
		ab.realtime, ba.realtime = !o.NoRealtime, !o.NoRealtime
	}
	if want := runtime.NumCPU() + 2; runtime.GOMAXPROCS(0) < want {
		runtime.GOMAXPROCS(want)
	}
	for _, d := range m.dirs {
		go d.run()
	}
	return m, nil
}

func (m *Mesh) stateFile() string { return filepath.Join(StateDir, "mesh-"+m.Name+".pid") }

// Set replaces the impairment from host a to host b now.
func (m *Mesh) Set(a, b string, p Params) error {
	d := m.dirs[[2]string{a, b}]
	if d == nil {
		return fmt.Errorf("no mesh link %s->%s", a, b)
	}
	d.set(p)
	return nil
}

// Stats returns the counters of the direction from a to b.
func (m *Mesh) Stats(a, b string) (Stats, bool) {
	d := m.dirs[[2]string{a, b}]
	if d == nil {
		return Stats{}, false
	}
	return d.snapshot(), true
}

// Close stops forwarding, kills what runs in the namespaces and deletes them.
func (m *Mesh) Close() error {
	m.closeOnce.Do(func() {
		for _, d := range m.dirs {
			d.close()
		}
		for _, fd := range m.fds {
			unix.Close(fd)
		}
		var errs []error
		for _, h := range m.Hosts {
			errs = append(errs, removeNamespace(h.NS))
		}
		os.Remove(m.stateFile())
		m.closeErr = errors.Join(errs...)
	})
	return m.closeErr
}

// cleanupMeshes removes the namespaces of meshes whose owner died (a test
// killed at its timeout): their TUN devices went with the owner, the
// namespaces and what runs in them stay until removed.
func cleanupMeshes() {
	ents, _ := os.ReadDir("/run/netns")
	for _, e := range ents {
		ns := e.Name()
		if !strings.HasPrefix(ns, meshPrefix) {
			continue
		}
		name := strings.TrimPrefix(ns, meshPrefix)
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			name = name[:i]
		}
		state := filepath.Join(StateDir, "mesh-"+name+".pid")
		b, err := os.ReadFile(state)
		owner, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		if err == nil && owner > 0 && syscall.Kill(owner, 0) == nil {
			continue
		}
		_ = removeNamespace(ns)
		os.Remove(state)
	}
}
