package rtc

import (
	"testing"
	"time"

	"github.com/pion/interceptor"
	"github.com/pion/interceptor/pkg/twcc"
	"github.com/pion/rtcp"
	"github.com/pion/rtp"
)

// The publisher chain's transport-wide feedback reports every packet that
// carried a transport sequence number, as Pion's sender interceptor does,
// and ignores a stream without the extension.
func TestTWCCFeedbackReportsEveryPacket(t *testing.T) {
	chain, err := NewPublisherInterceptor()
	if err != nil {
		t.Fatal(err)
	}
	defer chain.Close()
	fb := make(chan *rtcp.TransportLayerCC, 16)
	chain.BindRTCPWriter(interceptor.RTCPWriterFunc(func(pkts []rtcp.Packet, _ interceptor.Attributes) (int, error) {
		for _, p := range pkts {
			if cc, ok := p.(*rtcp.TransportLayerCC); ok {
				fb <- cc
			}
		}
		return 0, nil
	}))
	var n int
	inner := interceptor.RTPReaderFunc(func(_ []byte, a interceptor.Attributes) (int, interceptor.Attributes, error) { return n, a, nil })
	info := &interceptor.StreamInfo{SSRC: 42, ClockRate: 90000, MimeType: "video/VP8",
		RTPHeaderExtensions: []interceptor.RTPHeaderExtension{{URI: transportCCURI, ID: 5}}}
	r := chain.BindRemoteStream(info, inner)
	plain := chain.BindRemoteStream(&interceptor.StreamInfo{SSRC: 43, ClockRate: 48000, MimeType: "audio/opus"}, inner)

	attrs := interceptor.Attributes{}
	for seq := uint16(0); seq < 10; seq++ {
		h := rtp.Header{Version: 2, SSRC: 42, SequenceNumber: 100 + seq}
		if err := h.SetExtension(5, []byte{0, byte(seq)}); err != nil {
			t.Fatal(err)
		}
		b, err := (&rtp.Packet{Header: h, Payload: []byte{1}}).Marshal()
		if err != nil {
			t.Fatal(err)
		}
		n = len(b)
		clear(attrs) // a reused map, as the session's
		if _, _, err := r.Read(b, attrs); err != nil {
			t.Fatal(err)
		}
		a := rtp.Header{Version: 2, SSRC: 43, SequenceNumber: seq}
		ab, _ := (&rtp.Packet{Header: a, Payload: []byte{1}}).Marshal()
		n = len(ab)
		if _, _, err := plain.Read(ab, nil); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case cc := <-fb:
		if cc.MediaSSRC != 42 || cc.BaseSequenceNumber != 0 || cc.PacketStatusCount != 10 {
			t.Fatalf("feedback %+v: want 10 packets of SSRC 42 from sequence 0", cc)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("no transport-wide feedback")
	}
}

// BenchmarkTWCCRecord is one received packet through the transport-wide
// feedback sender: Petrel's (a mutex) against Pion's (a channel send to its
// goroutine).
func BenchmarkTWCCRecord(b *testing.B) {
	pion, err := twcc.NewSenderInterceptor(twcc.SendInterval(100 * time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	for _, f := range []struct {
		name string
		f    interceptor.Factory
	}{{"petrel", &twccFactory{interval: 100 * time.Millisecond}}, {"pion", pion}} {
		b.Run(f.name, func(b *testing.B) {
			ic, err := f.f.NewInterceptor("")
			if err != nil {
				b.Fatal(err)
			}
			defer ic.Close()
			ic.BindRTCPWriter(interceptor.RTCPWriterFunc(func([]rtcp.Packet, interceptor.Attributes) (int, error) { return 0, nil }))
			h := rtp.Header{Version: 2, SSRC: 42}
			_ = h.SetExtension(5, []byte{0, 0})
			pkt, _ := (&rtp.Packet{Header: h, Payload: make([]byte, 1000)}).Marshal()
			r := ic.BindRemoteStream(&interceptor.StreamInfo{SSRC: 42,
				RTPHeaderExtensions: []interceptor.RTPHeaderExtension{{URI: transportCCURI, ID: 5}}},
				interceptor.RTPReaderFunc(func(_ []byte, a interceptor.Attributes) (int, interceptor.Attributes, error) { return len(pkt), a, nil }))
			attrs := interceptor.Attributes{}
			var hdr rtp.Header
			_, _ = hdr.Unmarshal(pkt)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				ext := hdr.GetExtension(5)
				ext[0], ext[1] = byte(i>>8), byte(i)
				attrs[HeaderKey] = &hdr
				_, _, _ = r.Read(pkt, attrs)
			}
		})
	}
}
