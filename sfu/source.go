package sfu

// Source is where one layer's packets come from: a stream a publisher's
// session receives (IncomingTrack), or a track fed from inside the server
// (LocalTrack: cameras, WebTransport, other nodes). Everything after ReadRTP
// — cache, parse, fan-out — is the same for all.
type Source interface {
	// ReadRTP blocks for the next RTP packet; an error ends the layer.
	ReadRTP(buf []byte) (int, error)
	// ReadRTCP blocks for the publisher's next RTCP compound packet.
	ReadRTCP(buf []byte) (int, error)
	SSRC() uint32
	// RID is the simulcast encoding's id, "" for a single-layer track.
	RID() string
	// RequestKeyframe asks the publisher for a keyframe (rate limited by the caller).
	RequestKeyframe()
	// Stop ends reading; pending reads return an error, and the session
	// takes no more packets for the stream.
	Stop()
}

// pushSource is a Source that can hand the layer each packet on the
// goroutine that received it (a session's socket reader) instead of queueing
// it for the layer's reader goroutine: no goroutine wake-up per packet. The
// reader offers fn after a packet it read; PushTo takes it (true) only when
// nothing is left queued, so packets stay in order. PushTo(nil), called from
// fn, queues the next packets again. fn must not keep b.
type pushSource interface {
	PushTo(fn func(b []byte)) bool
}
