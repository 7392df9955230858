package hostile

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/client"
)

// TestRepeatedDataChannels: a participant that opens the room's data
// channel label again and again, and channels of labels the room does not
// use, gets each of them closed by the server; the server holds no reader
// for them, and the first channels go on carrying the room's messages.
// Over a PeerConnection and over a lean data session.
func TestRepeatedDataChannels(t *testing.T) {
	for _, side := range []struct {
		name string
		args []string
	}{{"peerconnection", nil}, {"lean", []string{"--lean-egress"}}} {
		t.Run(side.name, func(t *testing.T) {
			s := Start(t, Options{Args: side.args})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			g := auth.Grants{Publish: true, Subscribe: true, PublishData: true}
			alice, err := client.Join(ctx, s.WS, s.Token(t, "dc", "alice", g), client.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer alice.Close()
			mallory, err := client.Join(ctx, s.WS, s.Token(t, "dc", "mallory", g), client.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer mallory.Close()
			time.Sleep(300 * time.Millisecond)
			before := s.Goroutines(t)

			const n = 60
			var closed atomic.Int32
			for i := 0; i < n; i++ {
				label := "_reliable"
				if i%3 == 1 {
					label = "_lossy"
				} else if i%3 == 2 {
					label = "mine"
				}
				dc, err := mallory.Pub.CreateDataChannel(label, nil)
				if err != nil {
					t.Fatal(err)
				}
				dc.OnClose(func() { closed.Add(1) })
			}
			deadline := time.Now().Add(10 * time.Second)
			for closed.Load() < n && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			if c := closed.Load(); c < n {
				t.Errorf("the server closed %d of %d channels it has no use for", c, n)
			}
			time.Sleep(300 * time.Millisecond)
			if after := s.Goroutines(t); after > before+10 {
				t.Errorf("goroutines went from %d to %d", before, after)
			}

			// The first channels still carry the room's messages, both ways.
			for _, m := range []struct {
				from, to *client.Client
				text     string
			}{{alice, mallory, "to mallory"}, {mallory, alice, "to alice"}} {
				if err := m.from.SendData([]byte(m.text), true, true); err != nil {
					t.Fatal(err)
				}
				select {
				case d := <-m.to.DataIn:
					if string(d.Payload) != m.text {
						t.Errorf("got %q, want %q", d.Payload, m.text)
					}
				case <-time.After(5 * time.Second):
					t.Fatalf("%q did not arrive", m.text)
				}
			}
			if !strings.Contains(s.Logs(), "data channel refused") {
				t.Error("no log line for the refused channels")
			}
			s.Healthy(t)
		})
	}
}
