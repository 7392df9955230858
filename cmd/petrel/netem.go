package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/petrel-sfu/petrel/netem"
)

func init() { register("netem", "userspace network emulator", netemMain) }

const netemUsage = `usage: petrel netem <command> [flags]

  up       create a lab and forward packets until interrupted
  down     stop a lab started by "up" (by name) and remove it
  run      create a lab, run a command in host a (and one in b), tear down
  cleanup  remove namespaces left by crashed labs (--all: every lab)
  list     show the labs on this machine
  profiles show the named profiles

Hosts: a = 10.201.0.1 in namespace petrel-<name>-a, b = 10.201.0.2 in
petrel-<name>-b. Impairment per direction in tc netem syntax, e.g.
  --profile mobile
  --both "delay 40ms 15ms distribution normal loss 1% rate 10mbit limit 500"
  --ab "delay 40ms 15ms" --ba "delay 40ms"
  --script steps.txt   (lines like "at 5s rate 1mbit delay 100ms", "at 9s b->a loss 5%")
`

func netemMain(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, netemUsage)
		return 2
	}
	var err error
	switch args[0] {
	case "up":
		err = netemUp(args[1:])
	case "down":
		err = netemDown(args[1:])
	case "run":
		var code int
		code, err = netemRun(args[1:])
		if err == nil {
			return code
		}
	case "cleanup":
		err = netemCleanup(args[1:])
	case "list":
		err = netemList()
	case "profiles":
		for _, n := range netem.ProfileNames() {
			p, _ := netem.LookupProfile(n)
			fmt.Printf("%-18s %s\n%-18s   %s\n", n, p.Note, "", p.Spec)
		}
	case "help", "-h", "--help":
		fmt.Fprint(os.Stdout, netemUsage)
	default:
		fmt.Fprintf(os.Stderr, "petrel netem: unknown command %q\n%s", args[0], netemUsage)
		return 2
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "petrel netem:", err)
		return 1
	}
	return 0
}

// specFlags are the impairment flags shared by up and run.
type specFlags struct {
	name, profile, both, ab, ba, script string
	seed                                uint64
	stats                               time.Duration
}

func (s *specFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&s.name, "name", "", "lab name (namespaces petrel-<name>-a/-b); default <pid>-<n>")
	fs.StringVar(&s.profile, "profile", "none", "named profile (see petrel netem profiles)")
	fs.StringVar(&s.both, "both", "", "netem parameters for both directions (overrides --profile)")
	fs.StringVar(&s.ab, "ab", "", "netem parameters for a->b (overrides --profile/--both)")
	fs.StringVar(&s.ba, "ba", "", "netem parameters for b->a (overrides --profile/--both)")
	fs.StringVar(&s.script, "script", "", "file with timed changes (\"at 5s rate 1mbit\")")
	fs.Uint64Var(&s.seed, "seed", 0, "random seed for loss and jitter (0: time)")
	fs.DurationVar(&s.stats, "stats", 0, "print counters at this interval (0: only at the end)")
}

func (s *specFlags) options() (netem.Options, netem.Script, error) {
	o := netem.Options{Name: s.name, Seed: s.seed}
	prof, err := netem.LookupProfile(s.profile)
	if err != nil {
		return o, nil, err
	}
	o.Spec = prof.Spec
	if s.both != "" {
		p, err := netem.ParseParams(s.both)
		if err != nil {
			return o, nil, fmt.Errorf("--both: %w", err)
		}
		o.Spec = netem.Spec{AB: p, BA: p}
	}
	for _, d := range []struct {
		flag string
		v    string
		dst  *netem.Params
	}{{"--ab", s.ab, &o.Spec.AB}, {"--ba", s.ba, &o.Spec.BA}} {
		if d.v == "" {
			continue
		}
		p, err := netem.ParseParams(d.v)
		if err != nil {
			return o, nil, fmt.Errorf("%s: %w", d.flag, err)
		}
		*d.dst = p
	}
	var sc netem.Script
	if s.script != "" {
		b, err := os.ReadFile(s.script)
		if err != nil {
			return o, nil, err
		}
		if sc, err = netem.ParseScript(string(b)); err != nil {
			return o, nil, fmt.Errorf("%s: %w", s.script, err)
		}
	}
	return o, sc, nil
}

func printStats(l *netem.Lab) {
	ab, ba := l.Stats()
	for _, x := range []struct {
		n string
		s netem.Stats
	}{{"a->b", ab}, {"b->a", ba}} {
		fmt.Fprintf(os.Stderr, "netem %s %s: in %d out %d bytes %d lost %d queue-drop %d pool-drop %d dup %d\n",
			l.Name, x.n, x.s.In, x.s.Out, x.s.Bytes, x.s.Lost, x.s.QueueDrop, x.s.PoolDrop, x.s.Dups)
	}
}

func startLab(sf *specFlags) (*netem.Lab, error) {
	o, sc, err := sf.options()
	if err != nil {
		return nil, err
	}
	// A crashed earlier run must not block this one.
	netem.Cleanup(false)
	l, err := netem.NewLab(o)
	if err != nil {
		return nil, err
	}
	if len(sc) > 0 {
		l.Play(sc, func(st netem.Step) {
			fmt.Fprintf(os.Stderr, "netem %s: at %v now %s\n", l.Name, st.At, l.Spec())
		})
	}
	return l, nil
}

func netemUp(args []string) error {
	fs := flag.NewFlagSet("netem up", flag.ExitOnError)
	var sf specFlags
	sf.register(fs)
	fs.Parse(args)
	l, err := startLab(&sf)
	if err != nil {
		return err
	}
	defer l.Close()
	fmt.Printf("lab %s up: a=%s (ip netns exec %s …), b=%s (ip netns exec %s …)\nimpairment: %s\n",
		l.Name, l.A.Addr, l.A.NS, l.B.Addr, l.B.NS, l.Spec())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	var tick <-chan time.Time
	if sf.stats > 0 {
		t := time.NewTicker(sf.stats)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-sig:
			printStats(l)
			return l.Close()
		case <-tick:
			printStats(l)
		}
	}
}

func netemDown(args []string) error {
	if len(args) != 1 {
		return errors.New("usage: petrel netem down <name>")
	}
	name := args[0]
	if b, err := os.ReadFile(netem.StateDir + "/" + name + ".pid"); err == nil {
		if pid, _ := strconv.Atoi(strings.TrimSpace(string(b))); pid > 0 && syscall.Kill(pid, syscall.SIGTERM) == nil {
			for i := 0; i < 100 && syscall.Kill(pid, 0) == nil; i++ {
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
	// Whatever the owner did not remove goes now.
	ls, err := netem.List()
	if err != nil {
		return err
	}
	found := false
	for _, lo := range ls {
		if lo.Lab == name {
			found = true
			exec.Command("ip", "netns", "del", lo.NS).Run()
		}
	}
	os.Remove(netem.StateDir + "/" + name + ".pid")
	if !found {
		fmt.Printf("lab %s is down\n", name)
	}
	return nil
}

func netemRun(args []string) (int, error) {
	fs := flag.NewFlagSet("netem run", flag.ExitOnError)
	var sf specFlags
	sf.register(fs)
	bcmd := fs.String("b", "", "shell command to run in host b for the duration (e.g. a server)")
	fs.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: petrel netem run [flags] -- command [args]  (runs in host a; $PETREL_NETEM_PEER is b's address)")
		fs.PrintDefaults()
	}
	fs.Parse(args)
	if fs.NArg() == 0 {
		fs.Usage()
		return 2, nil
	}
	l, err := startLab(&sf)
	if err != nil {
		return 1, err
	}
	defer l.Close()
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if *bcmd != "" {
		b := l.B.Command(ctx, "sh", "-c", *bcmd)
		b.Stdout, b.Stderr = os.Stderr, os.Stderr
		if err := b.Start(); err != nil {
			return 1, err
		}
		defer func() { b.Cancel(); b.Wait() }()
		time.Sleep(300 * time.Millisecond) // let a server bind before the client starts
	}
	a := l.A.Command(ctx, fs.Arg(0), fs.Args()[1:]...)
	a.Stdin, a.Stdout, a.Stderr = os.Stdin, os.Stdout, os.Stderr
	err = a.Run()
	printStats(l)
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), nil
	}
	if err != nil {
		return 1, err
	}
	return 0, nil
}

func netemCleanup(args []string) error {
	fs := flag.NewFlagSet("netem cleanup", flag.ExitOnError)
	all := fs.Bool("all", false, "also remove labs whose owner is still running")
	fs.Parse(args)
	removed, err := netem.Cleanup(*all)
	for _, ns := range removed {
		fmt.Println("removed", ns)
	}
	return err
}

func netemList() error {
	ls, err := netem.List()
	if err != nil {
		return err
	}
	for _, lo := range ls {
		state := "orphaned"
		if lo.Alive {
			state = fmt.Sprintf("owner pid %d", lo.Owner)
		}
		fmt.Printf("%-30s lab %-20s %s\n", lo.NS, lo.Lab, state)
	}
	return nil
}
