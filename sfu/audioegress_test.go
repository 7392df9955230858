package sfu

import (
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pion/rtp"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/protocol"
)

// countWriter counts what one listener's DownTrack writes (RTP header and
// payload, before SRTP).
type countWriter struct{ bytes, packets *atomic.Int64 }

func (w countWriter) WriteRTP(h *rtp.Header, p []byte) (int, error) {
	n := h.MarshalSize() + len(p)
	w.bytes.Add(int64(n))
	w.packets.Add(1)
	return n, nil
}

// BenchmarkAudioLastNEgress measures what one listener is sent in an
// audio room of 20 and of 100 publishers, with audio Last-N off and at 3: each
// publisher (a local track, through the real reader, speaker detection,
// selection and DownTrack) sends 50 packets a second of 80 bytes of payload
// with its audio level; five of them talk in turns of a second, the others send
// room noise. Each iteration is 4 s of real time: run with -benchtime 1x.
func BenchmarkAudioLastNEgress(b *testing.B) {
	for _, people := range []int{20, 100} {
		for _, n := range []int{0, 3} {
			b.Run(fmt.Sprintf("participants=%d/audio_last_n=%d", people, n), func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					bps, pps := audioRoomEgress(b, people, n, 4*time.Second)
					b.ReportMetric(bps, "bytes/s/listener")
					b.ReportMetric(pps, "packets/s/listener")
				}
			})
		}
	}
}

func audioRoomEgress(b *testing.B, people, n int, run time.Duration) (bps, pps float64) {
	cfg := config.Default()
	cfg.RTC.AudioLastN = n
	cfg.Limits.MaxParticipantsPerRoom = people + 1
	m := NewManager(cfg, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	var bytes, packets atomic.Int64
	var tracks []*LocalTrack
	listener, err := m.JoinLocal(LocalOptions{Room: "egress", Identity: "listener", Grants: auth.Grants{Subscribe: true}})
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < people; i++ {
		p, err := m.JoinLocal(LocalOptions{Room: "egress", Identity: fmt.Sprint("p", i), Grants: auth.Grants{Publish: true}})
		if err != nil {
			b.Fatal(err)
		}
		lt, err := p.PublishLocal(LocalTrackOptions{Info: protocol.TrackInfo{Kind: "audio", Source: "microphone"},
			Codec: Codec{MimeType: "audio/opus", ClockRate: 48000, Channels: 2, PayloadType: 111}, AudioLevelExt: 1})
		if err != nil {
			b.Fatal(err)
		}
		defer lt.Close()
		d := newDownTrack(lt.Publication(), listener)
		d.bindWriter(countWriter{&bytes, &packets}, uint32(1000+i), 111, 48000, 0, 0)
		lt.Publication().addDown(d)
		tracks = append(tracks, lt)
	}
	defer m.Room("egress").Close("done")
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	payload := make([]byte, 80)
	pkt := &rtp.Packet{Payload: payload}
	frames := int(run / (20 * time.Millisecond))
	warm := frames / 4 // the first second: noise floors, the first selection
	for f := 0; f < frames; f++ {
		<-tick.C
		if f == warm {
			bytes.Store(0)
			packets.Store(0)
		}
		talker := 1 + f/50%5 // p1 to p5 take turns, a second each
		for i, lt := range tracks {
			level := byte(95 + f%4)
			if i == talker && f%15 >= 3 {
				level = byte(40 + f%8)
			}
			pkt.Header = rtp.Header{Version: 2, PayloadType: 111, SequenceNumber: uint16(f), Timestamp: uint32(f * 960), SSRC: uint32(i + 1)}
			_ = pkt.Header.SetExtension(1, []byte{level})
			if err := lt.WritePacket(pkt); err != nil {
				b.Fatal(err)
			}
		}
	}
	time.Sleep(50 * time.Millisecond) // the readers' queues drain
	secs := (run - time.Duration(warm)*20*time.Millisecond).Seconds()
	return float64(bytes.Load()) / secs, float64(packets.Load()) / secs
}
