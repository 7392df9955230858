package datachan

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/pion/datachannel"
	"github.com/pion/logging"
	"github.com/pion/sctp"
)

// udpPair is two connected UDP sockets on loopback.
func udpPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	x, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	y, err := net.DialUDP("udp4", nil, x.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	x.Close()
	xx, err := net.DialUDP("udp4", x.LocalAddr().(*net.UDPAddr), y.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { xx.Close(); y.Close() })
	return xx, y
}

// TestPion: Petrel's association and pion/sctp with pion/datachannel (what a
// Pion PeerConnection runs) open channels to each other, carry messages of
// every size both ways, and close a channel from either end.
func TestPion(t *testing.T) {
	ours, theirs := udpPair(t)
	a := New(Config{Conn: ours})
	lf := logging.NewDefaultLoggerFactory()
	lf.DefaultLogLevel = logging.LogLevelDisabled
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := sctp.ClientContext(ctx, sctp.WithNetConn(theirs), sctp.WithLoggerFactory(lf), sctp.WithMaxMessageSize(256<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	defer a.Close()
	select {
	case <-a.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("not established")
	}

	// Pion opens, Petrel reads.
	pc, err := datachannel.Dial(p, 0, &datachannel.Config{ChannelType: datachannel.ChannelTypeReliable, Label: "from-pion", LoggerFactory: lf})
	if err != nil {
		t.Fatal(err)
	}
	r := accept(t, a)
	if r.Label() != "from-pion" || r.ID() != 0 {
		t.Fatalf("accepted %q on %d", r.Label(), r.ID())
	}
	const n = 300
	done := make(chan error, 1)
	go func() { done <- receive(r, n) }()
	for i := 0; i < n; i++ {
		for pc.BufferedAmount() > 1<<20 {
			time.Sleep(time.Millisecond)
		}
		if _, err := pc.WriteDataChannel(message(i, 1+(i*997)%70000), false); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// Petrel opens, Pion reads.
	c, err := a.Open("from-petrel", Options{Protocol: "p"})
	if err != nil {
		t.Fatal(err)
	}
	acc := make(chan *datachannel.DataChannel, 1)
	go func() {
		dc, err := datachannel.Accept(p, &datachannel.Config{LoggerFactory: lf}, pc)
		if err != nil {
			t.Error(err)
		}
		acc <- dc
	}()
	var pr *datachannel.DataChannel
	select {
	case pr = <-acc:
	case <-time.After(5 * time.Second):
		t.Fatal("Pion accepted no channel")
	}
	if pr.Config.Label != "from-petrel" || pr.Config.Protocol != "p" {
		t.Fatalf("Pion got %+v", pr.Config)
	}
	go func() {
		buf := make([]byte, 1<<20)
		for i := 0; i < n; i++ {
			k, isString, err := pr.ReadDataChannel(buf)
			if err != nil {
				done <- err
				return
			}
			if want := message(i, 1+(i*991)%70000); string(buf[:k]) != string(want) || isString != (i%2 == 0) {
				done <- errors.New("Pion read a wrong message")
				return
			}
		}
		done <- nil
	}()
	for i := 0; i < n; i++ {
		for c.BufferedAmount() > 1<<20 {
			time.Sleep(time.Millisecond)
		}
		if err := c.Send(message(i, 1+(i*991)%70000), i%2 == 0); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("Pion did not read everything: %+v", a.Stats())
	}

	// Pion closes its channel: Petrel's reader ends.
	if err := pc.Close(); err != nil {
		t.Fatal(err)
	}
	go func() { _, err := r.Read(make([]byte, 10)); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, io.EOF) {
			t.Fatalf("after Pion closed: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Petrel's channel stayed open after Pion closed it")
	}
	// Petrel closes its channel: Pion's reader ends.
	c.Close()
	go func() { _, err := pr.Read(make([]byte, 10)); done <- err }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Pion read after Petrel closed")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Pion's channel stayed open after Petrel closed it")
	}
	if s := a.Stats(); s.Dropped != 0 {
		t.Errorf("%d packets dropped: %+v", s.Dropped, s)
	}
}
