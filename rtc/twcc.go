package rtc

import (
	"math/rand/v2"
	"sync"
	"time"

	"github.com/pion/interceptor"
	"github.com/pion/interceptor/pkg/twcc"
)

// HeaderKey is the key under which interceptor.Attributes caches a packet's
// parsed header (unexported in Pion: learnt from a map GetRTPHeader filled).
// A receiver that parsed the header already puts it there for the chain.
var HeaderKey = func() any {
	a := interceptor.Attributes{}
	if _, err := a.GetRTPHeader([]byte{0x80, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1}); err != nil || len(a) != 1 {
		return nil
	}
	for k := range a {
		return k
	}
	return nil
}()

const transportCCURI = "http://www.ietf.org/id/draft-holmer-rmcat-transport-wide-cc-extensions-01"

// twccFactory makes Pion's transport-wide feedback sender without its
// per-packet channel: Pion's hands every received packet to its feedback
// goroutine through an unbuffered channel, a goroutine wake-up per packet.
// Here the receiving goroutine records the arrival under a mutex and the
// feedback goroutine only wakes to send a report every interval.
type twccFactory struct{ interval time.Duration }

func (f *twccFactory) NewInterceptor(string) (interceptor.Interceptor, error) {
	return &twccSender{interval: f.interval, start: time.Now(), done: make(chan struct{})}, nil
}

type twccSender struct {
	interceptor.NoOp
	interval time.Duration
	start    time.Time
	wg       sync.WaitGroup

	mu     sync.Mutex
	rec    *twcc.Recorder // nil until the RTCP writer is bound
	done   chan struct{}
	closed bool
}

func (s *twccSender) BindRTCPWriter(w interceptor.RTCPWriter) interceptor.RTCPWriter {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rec != nil || s.closed {
		return w
	}
	s.rec = twcc.NewRecorder(rand.Uint32())
	s.wg.Add(1)
	go s.loop(w)
	return w
}

func (s *twccSender) BindRemoteStream(info *interceptor.StreamInfo, r interceptor.RTPReader) interceptor.RTPReader {
	var id uint8
	for _, e := range info.RTPHeaderExtensions {
		if e.URI == transportCCURI {
			id = uint8(e.ID)
		}
	}
	if id == 0 {
		return r
	}
	ssrc := info.SSRC
	return interceptor.RTPReaderFunc(func(b []byte, a interceptor.Attributes) (int, interceptor.Attributes, error) {
		n, a, err := r.Read(b, a)
		if err != nil {
			return 0, nil, err
		}
		if a == nil {
			a = interceptor.Attributes{}
		}
		h, err := a.GetRTPHeader(b[:n])
		if err != nil {
			return 0, nil, err
		}
		if ext := h.GetExtension(id); len(ext) >= 2 {
			seq := uint16(ext[0])<<8 | uint16(ext[1])
			at := time.Since(s.start).Microseconds()
			s.mu.Lock()
			if s.rec != nil {
				s.rec.Record(ssrc, seq, at)
			}
			s.mu.Unlock()
		}
		return n, a, nil
	})
}

func (s *twccSender) loop(w interceptor.RTCPWriter) {
	defer s.wg.Done()
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
			s.mu.Lock()
			pkts := s.rec.BuildFeedbackPacket()
			s.mu.Unlock()
			if len(pkts) > 0 {
				_, _ = w.Write(pkts, nil)
			}
		}
	}
}

func (s *twccSender) Close() error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.done)
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}
