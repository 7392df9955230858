package sfu

import (
	"github.com/pion/rtcp"
	"github.com/pion/webrtc/v4"
)

// source is where one layer's packets come from: a publisher's WebRTC track, or a
// track fed from inside the server (LocalTrack: cameras, WebTransport, other
// nodes). Everything after ReadRTP — cache, parse, fan-out — is the same for all.
type source interface {
	// ReadRTP blocks for the next RTP packet; an error ends the layer.
	ReadRTP(buf []byte) (int, error)
	// ReadRTCP blocks for the publisher's next RTCP compound packet.
	ReadRTCP(buf []byte) (int, error)
	SSRC() uint32
	// RID is the simulcast encoding's id, "" for a single-layer track.
	RID() string
	// RequestKeyframe asks the publisher for a keyframe (rate limited by the caller).
	RequestKeyframe()
	// Stop ends reading; pending reads return an error.
	Stop()
}

// webrtcSource is one encoding of a publisher's WebRTC track.
type webrtcSource struct {
	remote   *webrtc.TrackRemote
	receiver *webrtc.RTPReceiver
	owner    *Participant
}

func (s *webrtcSource) ReadRTP(buf []byte) (int, error) {
	n, _, err := s.remote.Read(buf)
	return n, err
}

func (s *webrtcSource) ReadRTCP(buf []byte) (int, error) {
	if rid := s.remote.RID(); rid != "" {
		n, _, err := s.receiver.ReadSimulcast(buf, rid)
		return n, err
	}
	n, _, err := s.receiver.Read(buf)
	return n, err
}

func (s *webrtcSource) SSRC() uint32 { return uint32(s.remote.SSRC()) }
func (s *webrtcSource) RID() string  { return s.remote.RID() }
func (s *webrtcSource) Stop()        { _ = s.receiver.Stop() }

func (s *webrtcSource) RequestKeyframe() {
	s.owner.writeRTCP([]rtcp.Packet{&rtcp.PictureLossIndication{MediaSSRC: s.SSRC()}})
}

// refuse stops a stream the participant may not publish, so that nothing
// reads or queues its packets: a PeerConnection's transceiver stops (its
// receiver ends, and the next answer has the section inactive), a lean
// session's section binds no more SSRCs (egress.InTrack.Stop). Pion takes
// packets a client still sends on a stopped receiver's SSRC into a stream
// nobody reads; rtc's buffer factory caps such a stream at 256 KB.
func refuse(src source) {
	if w, ok := src.(*webrtcSource); ok {
		if tr := w.receiver.RTPTransceiver(); tr != nil {
			_ = tr.Stop()
			return
		}
	}
	src.Stop()
}
