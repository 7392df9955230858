package rtc

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"
)

// keepK is a filter that takes the datagrams starting with 'k'.
type keepK struct{ got []string }

func (f *keepK) Handle(b []byte, from netip.AddrPort) bool {
	if len(b) > 0 && b[0] == 'k' {
		f.got = append(f.got, string(b))
		return true
	}
	return false
}

// The shared socket's batched reader hands every datagram to the filter, the
// rest to the mux with the sender's address, in order, across batches; a
// datagram too large for the buffers is dropped, not cut.
func TestFilterConnBatches(t *testing.T) {
	for _, network := range []string{"udp4", "udp6"} {
		t.Run(network, func(t *testing.T) {
			host := "127.0.0.1"
			if network == "udp6" {
				host = "[::1]"
			}
			ln, err := net.ListenPacket(network, host+":0")
			if err != nil {
				t.Skipf("%s: %v", network, err)
			}
			c := newFilterConn(ln.(*net.UDPConn))
			defer c.Close()
			f := &keepK{}
			var pf PacketFilter = f
			c.f.Store(&pf)
			peer, err := net.DialUDP(network, nil, ln.LocalAddr().(*net.UDPAddr))
			if err != nil {
				t.Fatal(err)
			}
			defer peer.Close()

			var want []string
			_, _ = peer.Write(bytes.Repeat([]byte{'p'}, recvMTU+100)) // too large: dropped
			for i := 0; i < 3*recvBatch; i++ {
				msg := fmt.Sprintf("p%d", i)
				if i%3 == 0 {
					msg = fmt.Sprintf("k%d", i)
				} else {
					want = append(want, msg)
				}
				if _, err := peer.Write([]byte(msg)); err != nil {
					t.Fatal(err)
				}
			}
			self := peer.LocalAddr().(*net.UDPAddr).AddrPort()
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			b := make([]byte, 8192)
			for _, w := range want {
				n, from, err := c.ReadFromAddrPort(b)
				if err != nil {
					t.Fatalf("read: %v", err)
				}
				if string(b[:n]) != w {
					t.Fatalf("read %q, want %q", b[:n], w)
				}
				if from.Addr().Unmap() != self.Addr() || from.Port() != self.Port() {
					t.Fatalf("from %v, want %v", from, self)
				}
			}
			if len(f.got) != recvBatch {
				t.Fatalf("filter took %d datagrams, want %d", len(f.got), recvBatch)
			}
			allocs := testing.AllocsPerRun(50, func() {
				_, _ = peer.Write([]byte("p"))
				_, _, _ = c.ReadFromAddrPort(b)
			})
			if allocs > 0 && !raceOn {
				t.Fatalf("%.1f allocations per datagram read", allocs)
			}
		})
	}
}
