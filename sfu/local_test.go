package sfu

import (
	"io"
	"log/slog"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pion/rtp"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/protocol"
)

// A packet a Go component writes into a local track (the audio mixer, the
// camera gateway, ingest) reaches a subscriber without a heap allocation (the
// mixer writes one per participant every 20 ms), whatever the packets' sizes.
func TestLocalTrackForwardsWithoutAllocating(t *testing.T) {
	m := NewManager(config.Default(), nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	listener, err := m.JoinLocal(LocalOptions{Room: "a", Identity: "l", Grants: auth.Grants{Subscribe: true}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := m.JoinLocal(LocalOptions{Room: "a", Identity: "p", Grants: auth.Grants{Publish: true}})
	if err != nil {
		t.Fatal(err)
	}
	lt, err := p.PublishLocal(LocalTrackOptions{Info: protocol.TrackInfo{Kind: "audio", Source: "microphone"},
		Codec: Codec{MimeType: "audio/opus", ClockRate: 48000, Channels: 2, PayloadType: 111}, AudioLevelExt: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer lt.Close()
	var bytes, packets atomic.Int64
	d := newDownTrack(lt.Publication(), listener)
	d.bindWriter(countWriter{&bytes, &packets}, 1000, 111, 48000, 0, 0)
	lt.Publication().addDown(d)
	pkt := &rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 111, SSRC: 1}, Payload: make([]byte, 80)}
	if err := pkt.Header.SetExtension(1, []byte{50}); err != nil {
		t.Fatal(err)
	}
	small, large := pkt.Payload, make([]byte, 1000)
	send := func(f int) {
		// Sizes alternate: a pooled buffer that held a small packet takes a large one.
		pkt.Payload = small
		if f%2 == 1 {
			pkt.Payload = large
		}
		pkt.Header.SequenceNumber, pkt.Header.Timestamp = uint16(f), uint32(f*960)
		if err := lt.WritePacket(pkt); err != nil {
			t.Fatal(err)
		}
	}
	for f := 0; f < 100; f++ {
		send(f)
		time.Sleep(time.Millisecond)
	}
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	n0 := packets.Load()
	for f := 100; f < 1100; f++ {
		send(f)
		for packets.Load() < n0+int64(f-99) {
			runtime.Gosched()
		}
	}
	runtime.ReadMemStats(&b)
	// The room's own loops (selection, stats) may allocate now and then.
	if per := float64(b.Mallocs-a.Mallocs) / 1000; per > 0.1 {
		t.Fatalf("%.2f allocations per packet (%.0f bytes)", per, float64(b.TotalAlloc-a.TotalAlloc)/1000)
	}
}
