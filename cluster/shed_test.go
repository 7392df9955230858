package cluster

import (
	"fmt"
	"io"
	"log/slog"
	"testing"

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
		p, err := mgr.JoinLocal(sfu.LocalOptions{Room: "r", Identity: fmt.Sprintf("p%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close("done")
	}
	n := &Node{mgr: mgr, log: log}
	n.shed.init(0.8)
	room := mgr.Room("r")
	beat := func(cpu float64, times int) {
		for i := 0; i < times; i++ {
			n.shed.update(n, cpu)
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
