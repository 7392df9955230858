package camera

import (
	"encoding/binary"
	"io"
	"log/slog"
	"testing"

	"github.com/bluenviron/gortsplib/v4/pkg/description"
	"github.com/bluenviron/gortsplib/v4/pkg/format"
	"github.com/bluenviron/gortsplib/v4/pkg/sdp"
	"github.com/pion/rtcp"
	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/config"
	"github.com/petrel-sfu/petrel/protocol"
	"github.com/petrel-sfu/petrel/sfu"
)

// fuzzTracks are a video and an audio LocalTrack the repacketizers write to.
func fuzzTracks(f *testing.F) (video, audio *sfu.LocalTrack) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	m := sfu.NewManager(config.Default(), nil, log)
	p, err := m.JoinLocal(sfu.LocalOptions{Room: "fuzz", Identity: "cam", Grants: auth.Grants{Publish: true}, Origin: sfu.Server})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { p.Close("done") })
	video, err = p.PublishLocal(sfu.LocalTrackOptions{Info: protocol.TrackInfo{Kind: "video", Source: "camera", SSRC: 1},
		Codec: sfu.Codec{MimeType: webrtc.MimeTypeH264, ClockRate: 90000, PayloadType: 102}})
	if err != nil {
		f.Fatal(err)
	}
	audio, err = p.PublishLocal(sfu.LocalTrackOptions{Info: protocol.TrackInfo{Kind: "audio", Source: "microphone", SSRC: 2},
		Codec: sfu.Codec{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2, PayloadType: 111}})
	if err != nil {
		f.Fatal(err)
	}
	return video, audio
}

// idr is an H.264 IDR slice in one packet: the repacketizer puts the
// parameter sets before it, so they go through the encoder.
func idr(ts uint32) *rtp.Packet {
	return &rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 96, SequenceNumber: 1, Timestamp: ts, Marker: true}, Payload: []byte{0x65, 0x88, 0x84, 0x00, 0x33}}
}

// FuzzRTSPDescription: a camera's answer to DESCRIBE (parsed by gortsplib)
// goes through what the gateway does with it: the codec choice, the
// parameter sets and picture size Petrel reads from the SPS, the AAC
// config, and a repacketizer started with those parameter sets.
func FuzzRTSPDescription(f *testing.F) {
	f.Add([]byte("v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=cam\r\nt=0 0\r\n" +
		"m=video 0 RTP/AVP 96\r\na=control:trackID=0\r\na=rtpmap:96 H264/90000\r\n" +
		"a=fmtp:96 packetization-mode=1;profile-level-id=42e01f;sprop-parameter-sets=Z0LAH9oBQBbsBEAAAAMAQAAADyPGDKg=,aM4PyA==\r\n" +
		"m=audio 0 RTP/AVP 97\r\na=control:trackID=1\r\na=rtpmap:97 MPEG4-GENERIC/16000/1\r\n" +
		"a=fmtp:97 profile-level-id=1;mode=AAC-hbr;sizelength=13;indexlength=3;indexdeltalength=3;config=1408\r\n"))
	f.Add([]byte("v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=cam\r\nt=0 0\r\n" +
		"m=video 0 RTP/AVP 96\r\na=rtpmap:96 H265/90000\r\na=fmtp:96 sprop-vps=QAEMAf//AWAAAAMAkAAAAwAAAwBdlZgJ;sprop-sps=QgEBAWAAAAMAkAAAAwAAAwBdoAKAgC0WWVmkkyvAQAAA+kAAF3AC;sprop-pps=RAHBcrRiQA==\r\n" +
		"m=audio 0 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n" +
		"m=audio 0 RTP/AVP 111\r\na=rtpmap:111 opus/48000/2\r\n"))
	video, _ := fuzzTracks(f)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		var s sdp.SessionDescription
		if s.Unmarshal(b) != nil {
			return
		}
		var desc description.Session
		if desc.Unmarshal(&s) != nil {
			return
		}
		_ = mediaList(&desc)
		var vps, sps, pps []byte
		mime := ""
		var f264 *format.H264
		var f265 *format.H265
		if desc.FindFormat(&f264) != nil {
			sps, pps = f264.SafeParams()
			mime = webrtc.MimeTypeH264
			_, _, _ = h264Info(sps)
		} else if desc.FindFormat(&f265) != nil {
			vps, sps, pps = f265.SafeParams()
			mime = webrtc.MimeTypeH265
		}
		var fAAC *format.MPEG4Audio
		if desc.FindFormat(&fAAC) != nil {
			if conf := fAAC.GetConfig(); conf != nil {
				_, _ = conf.Marshal()
			}
		}
		var fOpus *format.Opus
		_ = desc.FindFormat(&fOpus)
		var fG711 *format.G711
		_ = desc.FindFormat(&fG711)
		if mime == "" {
			return
		}
		r, err := newVideoRepack(mime, 102, 7, video, log)
		if err != nil {
			t.Fatal(err)
		}
		r.newSession(vps, sps, pps)
		r.push(idr(3000))
	})
}

// FuzzRTPPush: datagrams sent to an RTP push camera's ports (each input is
// a run of 2-byte-length-prefixed datagrams): RTP to the video and audio
// repacketizers, RTCP sender reports forwarded, as the push ingest does.
func FuzzRTPPush(f *testing.F) {
	frame := func(pkts ...[]byte) []byte {
		var out []byte
		for _, p := range pkts {
			out = binary.BigEndian.AppendUint16(out, uint16(len(p)))
			out = append(out, p...)
		}
		return out
	}
	m := func(p *rtp.Packet) []byte { b, _ := p.Marshal(); return b }
	sps := []byte{0x67, 0x42, 0xc0, 0x1f, 0xda, 0x01, 0x40, 0x16, 0xec, 0x04, 0x40, 0x00, 0x00, 0x03, 0x00, 0x40, 0x00, 0x00, 0x0f, 0x23, 0xc6, 0x0c, 0xa8}
	stapA := append([]byte{0x18, 0x00, byte(len(sps))}, sps...)
	stapA = append(stapA, 0x00, 0x04, 0x68, 0xce, 0x0f, 0xc8)
	sr, _ := (&rtcp.SenderReport{SSRC: 5, NTPTime: 1 << 40, RTPTime: 9000, PacketCount: 3}).Marshal()
	f.Add(frame(m(&rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 96, SequenceNumber: 1, Timestamp: 9000, SSRC: 5}, Payload: stapA}),
		m(idr(9000)),
		m(&rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 96, SequenceNumber: 2, Timestamp: 12000, SSRC: 5}, Payload: []byte{0x7c, 0x85, 0x88, 0x84}}),
		m(&rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 96, SequenceNumber: 3, Timestamp: 12000, SSRC: 5, Marker: true}, Payload: []byte{0x7c, 0x45, 0x00}}),
		m(&rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 111, SequenceNumber: 9, Timestamp: 960, SSRC: 6}, Payload: []byte{0xfc, 0xff, 0xfe}}),
		sr))
	video, audio := fuzzTracks(f)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := newVideoRepack(webrtc.MimeTypeH264, 102, 7, video, log)
		if err != nil {
			t.Fatal(err)
		}
		v.keep = true // as the push ingest reads every datagram into one buffer
		v.newSession(nil, nil, nil)
		a := &audioRelay{ssrc: 8, pt: 111, clock: 48000, track: audio}
		var pkt rtp.Packet
		buf := make([]byte, 1500)
		for n := 0; len(b) >= 2 && n < 64; n++ {
			l := int(binary.BigEndian.Uint16(b))
			b = b[2:]
			if l > len(b) {
				l = len(b)
			}
			d := buf[:copy(buf, b[:l])] // one read buffer for every datagram, as read() has
			b = b[l:]
			if pkt.Unmarshal(d) == nil && pkt.Version == 2 {
				switch pkt.PayloadType {
				case 96:
					v.push(&pkt)
				case 111:
					a.push(&pkt)
				}
				continue
			}
			pkts, err := rtcp.Unmarshal(d)
			if err != nil {
				continue
			}
			for _, p := range pkts {
				if sr, ok := p.(*rtcp.SenderReport); ok && v.synced {
					forwardSR(sr, v.ssrc, v.tsOff, v.track)
				}
			}
		}
	})
}
