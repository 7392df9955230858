package session

import "testing"

// TestSCTPMaxMTU: the largest SCTP packet a data session probes for leaves
// room for IPv4, UDP, TURN's ChannelData header and the DTLS record within
// the smaller of 1500 bytes and the host's interfaces' MTU.
func TestSCTPMaxMTU(t *testing.T) {
	for _, c := range []struct{ link, want int }{{1500, 1428}, {9001, 1428}, {1460, 1388}, {1280, 1208}} {
		if got := sctpMaxMTU(c.link); got != c.want {
			t.Errorf("link MTU %d: %d, want %d", c.link, got, c.want)
		}
		if got := sctpMaxMTU(c.link) + 20 + 8 + 4 + 37; got > min(c.link, 1500) {
			t.Errorf("link MTU %d: datagrams of %d bytes", c.link, got)
		}
	}
}
