package cluster

import (
	"io"
	"log/slog"
	"sync"
	"testing"

	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/sfu"
)

// The link's control reader and its sync loop may both find a mirror waiting
// and join it at once: one joins, the mirror ends up holding that live
// participant with its track, and no second copy is left in the room.
func TestConcurrentMaterializeJoinsOnce(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	mgr := sfu.NewManager(config.Default(), nil, log)
	n := &Node{mgr: mgr, log: log}
	mgr.SetHandover(n.isMirror)
	l := &Link{node: n, peer: "c", log: log, sendq: make(chan []byte, 1024), closed: make(chan struct{})}
	im := newImporter(l)
	im.onCtl(&ctlMsg{T: msgPart, Room: "r", ID: "carol"})
	im.onCtl(&ctlMsg{T: msgPub, Room: "r", ID: "carol", N: 1,
		Info:  &protocol.TrackInfo{Kind: "video", Source: "camera", SSRC: 1000},
		Codec: &codecJSON{MimeType: "video/VP8", ClockRate: 90000, PayloadType: 96}})
	mr := im.mirrors["r\x00carol"]
	for i := 0; i < 200; i++ {
		im.dematerialize(mr, "again")
		var wg sync.WaitGroup
		for range 2 {
			wg.Add(1)
			go func() { defer wg.Done(); im.materialize(mr) }()
		}
		wg.Wait()
		im.mu.Lock()
		p, lt := mr.p, mr.tracks[1].layers[0]
		im.mu.Unlock()
		var carols []*sfu.Participant
		for _, q := range mgr.Room("r").Participants() {
			if q.Identity() == "carol" {
				carols = append(carols, q)
			}
		}
		if len(carols) != 1 || p != carols[0] || lt == nil {
			t.Fatalf("round %d: %d participants named carol in the room, the mirror holds one of them: %v, its track: %v",
				i, len(carols), len(carols) > 0 && p == carols[0], lt != nil)
		}
	}
}
