package cluster

import (
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/sfu"
)

// Over the CPU threshold the node lowers its rooms' Last-N a step at a time
// (not below 2), and gives the steps back when the load has fallen.
func TestShedderStepsLastNDownAndBack(t *testing.T) {
	cfg := config.Default()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	mgr := sfu.NewManager(cfg, nil, log)
	for i := 0; i < 6; i++ {
		p, err := mgr.JoinLocal(sfu.LocalOptions{Room: "r", Identity: fmt.Sprintf("p%d", i), Grants: auth.Grants{Publish: true}})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close("done")
	}
	n := &Node{mgr: mgr, log: log}
	n.shed.init(0.8, 0)
	room := mgr.Room("r")
	beat := func(cpu float64, times int) {
		for i := 0; i < times; i++ {
			n.shed.update(n, cpu, 0)
		}
	}
	beat(0.9, shedOverN-1)
	if got := room.LastN(); got != 0 {
		t.Fatalf("shed before %d heartbeats over the threshold: last-n %d", shedOverN, got)
	}
	beat(0.9, 1)
	if got := room.LastN(); got != 4 { // all (5 others) minus one step
		t.Fatalf("after one step: last-n %d, want 4", got)
	}
	beat(0.95, 10*shedOverN)
	if got := room.LastN(); got != shedMinLastN {
		t.Fatalf("under sustained load: last-n %d, want the floor %d", got, shedMinLastN)
	}
	beat(0.7, 100) // between 70% of the threshold and the threshold: hold
	if got := room.LastN(); got != shedMinLastN {
		t.Fatalf("in the hysteresis band: last-n %d, want it held at %d", got, shedMinLastN)
	}
	if lvl := n.shed.level.Load(); lvl != 3 {
		t.Fatalf("level %d under sustained load, want 3 (5 others down to the floor of 2): more steps would only slow recovery", lvl)
	}
	beat(0.1, 3*shedUnderN)
	if got, lvl := room.LastN(), n.shed.level.Load(); got != 0 || lvl != 0 {
		t.Fatalf("after the load fell: last-n %d (want 0: all), level %d", got, lvl)
	}
}

// Over the egress threshold the node sheds by the same steps as over the CPU
// threshold, with its CPU low; it recovers only when both are low.
func TestShedderStepsOnEgress(t *testing.T) {
	cfg := config.Default()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	mgr := sfu.NewManager(cfg, nil, log)
	for i := 0; i < 6; i++ {
		p, err := mgr.JoinLocal(sfu.LocalOptions{Room: "r", Identity: fmt.Sprintf("p%d", i), Grants: auth.Grants{Publish: true}})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close("done")
	}
	n := &Node{mgr: mgr, log: log}
	n.shed.init(0.8, 100) // 80% CPU, 100 Mbit/s
	room := mgr.Room("r")
	beat := func(cpu, mbps float64, times int) {
		for i := 0; i < times; i++ {
			n.shed.update(n, cpu, mbps)
		}
	}
	beat(0.1, 90, 10*shedOverN)
	if got := room.LastN(); got != 0 {
		t.Fatalf("under the egress limit: last-n %d, want 0 (all)", got)
	}
	beat(0.1, 150, shedOverN)
	if got := room.LastN(); got != 4 {
		t.Fatalf("after %d heartbeats over the egress limit: last-n %d, want 4", shedOverN, got)
	}
	beat(0.1, 150, 10*shedOverN)
	if got := room.LastN(); got != shedMinLastN {
		t.Fatalf("under sustained egress: last-n %d, want the floor %d", got, shedMinLastN)
	}
	beat(0.1, 80, 10*shedUnderN) // egress in the hysteresis band: hold
	if got := room.LastN(); got != shedMinLastN {
		t.Fatalf("egress between 70%% of the limit and the limit: last-n %d, want it held", got)
	}
	beat(0.75, 10, 10*shedUnderN) // egress low, CPU in its band: hold
	if got := room.LastN(); got != shedMinLastN {
		t.Fatalf("CPU between 70%% of its limit and the limit: last-n %d, want it held", got)
	}
	beat(0.1, 10, 3*shedUnderN)
	if got, lvl := room.LastN(), n.shed.level.Load(); got != 0 || lvl != 0 {
		t.Fatalf("after egress fell: last-n %d (want 0: all), level %d", got, lvl)
	}

	// With no CPU limit the egress limit alone still sheds.
	n.shed.init(0, 100)
	beat(0.99, 10, 10*shedOverN)
	if got := room.LastN(); got != 0 {
		t.Fatalf("no CPU limit, egress low: last-n %d, want 0", got)
	}
	beat(0.99, 200, shedOverN)
	if got := room.LastN(); got != 4 {
		t.Fatalf("no CPU limit, egress over: last-n %d, want 4", got)
	}
}

// The meter turns the node's sent byte counter into Mbit/s between samples,
// and a counter that went back (a link closed) does not make a negative or
// huge rate.
func TestLoadMeterEgress(t *testing.T) {
	var m loadMeter
	m.sample(0, 1_000_000)
	time.Sleep(200 * time.Millisecond)
	_, _, mbps := m.sample(0, 1_000_000+2_500_000) // 20 Mbit in >= 0.2 s
	if mbps <= 0 || mbps > 100 {
		t.Fatalf("egress %.1f Mbit/s, want (0, 100]", mbps)
	}
	time.Sleep(100 * time.Millisecond)
	_, _, again := m.sample(0, 500_000)
	if again != mbps {
		t.Fatalf("after the counter went back: %.1f Mbit/s, want the previous %.1f", again, mbps)
	}
}
