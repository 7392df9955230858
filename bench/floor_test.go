// Package bench holds Petrel's benchmarks. This file measures the machine's
// forwarding floor: what one forwarded packet costs with nothing but the
// unavoidable work (one SRTP protect and one UDP send, or one UDP receive and one
// SRTP unprotect), so that the SFU's cost per packet can be read as a ratio to it.
//
//	go test -run '^$' -bench Floor -benchmem ./bench/
//
// Besides ns/op (wall time, which a busy shared machine inflates whenever the
// benchmark's thread is descheduled), each benchmark reports cpu-ns/op: the CPU
// time of the benchmark's own OS thread per packet (getrusage RUSAGE_THREAD,
// with the goroutine locked to its thread). On loopback the kernel delivers a
// datagram to the receiving socket inside the sender's send(2), so that work is
// in the sender's figure; the draining reader's CPU is not.
package bench

import (
	"crypto/rand"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pion/rtp"
	"github.com/pion/srtp/v3"
	"golang.org/x/net/ipv4"

	"github.com/petrel-sfu/petrel/bench/floor"
)

// floorPayload is the payload size that, with a 12-byte header, makes a 1200-byte
// RTP packet: Pion's default outbound MTU, so a full video packet.
const floorPayload = 1200 - 12

var floorProfiles = []struct {
	name    string
	profile srtp.ProtectionProfile
}{
	{"AES128GCM", srtp.ProtectionProfileAeadAes128Gcm},
	{"AES128CM_SHA1_80", srtp.ProtectionProfileAes128CmHmacSha1_80},
	// What two Pion peers (client and Petrel) negotiate by default: Pion offers
	// AES-256-GCM first. The fan-out benchmark's ratio uses this one.
	{"AES256GCM", srtp.ProtectionProfileAeadAes256Gcm},
}

func srtpContext(tb testing.TB, p srtp.ProtectionProfile) *srtp.Context {
	tb.Helper()
	kl, err := p.KeyLen()
	if err != nil {
		tb.Fatal(err)
	}
	sl, err := p.SaltLen()
	if err != nil {
		tb.Fatal(err)
	}
	key := make([]byte, kl)
	salt := make([]byte, sl)
	_, _ = rand.Read(key)
	_, _ = rand.Read(salt)
	c, err := srtp.CreateContext(key, salt, p)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// connectedPair returns a sender connected to a receiver, both on 127.0.0.1.
func connectedPair(tb testing.TB) (tx, rx *net.UDPConn) {
	tb.Helper()
	rx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		tb.Fatal(err)
	}
	tx, err = net.DialUDP("udp4", nil, rx.LocalAddr().(*net.UDPAddr))
	if err != nil {
		tb.Fatal(err)
	}
	_ = rx.SetReadBuffer(4 << 20)
	_ = tx.SetWriteBuffer(4 << 20)
	tb.Cleanup(func() { tx.Close(); rx.Close() })
	return tx, rx
}

// drainer is floor.Drain for the length of the benchmark.
func drainer(tb testing.TB, rx *net.UDPConn) *atomic.Int64 {
	got, stop := floor.Drain(rx)
	tb.Cleanup(stop)
	return got
}

// cpuMeter accumulates the benchmark thread's CPU time while the timer runs.
type cpuMeter struct {
	start time.Duration
	total time.Duration
}

func startCPU(b *testing.B) *cpuMeter {
	runtime.LockOSThread()
	b.Cleanup(runtime.UnlockOSThread)
	m := &cpuMeter{}
	m.resume()
	return m
}

func (m *cpuMeter) resume() { m.start = floor.ThreadCPU() }
func (m *cpuMeter) pause()  { m.total += floor.ThreadCPU() - m.start }

func (m *cpuMeter) report(b *testing.B) {
	b.ReportMetric(float64(m.total.Nanoseconds())/float64(b.N), "cpu-ns/op")
}

func floorHeader() rtp.Header {
	return rtp.Header{Version: 2, PayloadType: 96, SequenceNumber: 1, Timestamp: 90000, SSRC: 0x1234abcd}
}

// BenchmarkFloorEncrypt is SRTP protect of a 1200-byte packet alone.
func BenchmarkFloorEncrypt(b *testing.B) {
	for _, fp := range floorProfiles {
		b.Run(fp.name, func(b *testing.B) {
			ctx := srtpContext(b, fp.profile)
			h := floorHeader()
			payload := make([]byte, floorPayload)
			plain := make([]byte, 0, 1500)
			dst := make([]byte, 1500)
			b.SetBytes(1200)
			b.ReportAllocs()
			b.ResetTimer()
			cpu := startCPU(b)
			for i := 0; i < b.N; i++ {
				h.SequenceNumber++
				pkt, _ := h.MarshalTo(plain[:cap(plain)])
				plain = append(plain[:pkt], payload...)
				out, err := ctx.EncryptRTP(dst, plain, &h)
				if err != nil {
					b.Fatal(err)
				}
				dst = out[:cap(out)]
			}
			cpu.pause()
			cpu.report(b)
		})
	}
}

// BenchmarkFloorSend is the forwarding floor: marshal the rewritten header, SRTP
// protect, and one send(2) of the 1200-byte packet on a connected loopback socket
// to a reader on another goroutine. On loopback the send includes delivering to
// the receiver's socket queue, as it does for a Petrel subscriber on 127.0.0.1.
func BenchmarkFloorSend(b *testing.B) {
	for _, fp := range floorProfiles {
		b.Run(fp.name, func(b *testing.B) {
			benchSend(b, fp.profile, func(tx *net.UDPConn, to *net.UDPAddr, p []byte) error {
				_, err := tx.Write(p)
				return err
			}, true)
		})
	}
}

// BenchmarkFloorSendTo is the same with sendto(2) on an unconnected socket, which
// is what a shared ICE UDP mux (Pion's, Petrel's) does for every packet: the
// kernel looks the route up per packet.
func BenchmarkFloorSendTo(b *testing.B) {
	fp := floorProfiles[2]
	b.Run(fp.name, func(b *testing.B) {
		benchSend(b, fp.profile, func(tx *net.UDPConn, to *net.UDPAddr, p []byte) error {
			_, err := tx.WriteToUDP(p, to)
			return err
		}, false)
	})
}

func benchSend(b *testing.B, p srtp.ProtectionProfile, send func(*net.UDPConn, *net.UDPAddr, []byte) error, connected bool) {
	ctx := srtpContext(b, p)
	var tx, rx *net.UDPConn
	if connected {
		tx, rx = connectedPair(b)
	} else {
		var err error
		if rx, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}); err != nil {
			b.Fatal(err)
		}
		if tx, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}); err != nil {
			b.Fatal(err)
		}
		_ = rx.SetReadBuffer(4 << 20)
		_ = tx.SetWriteBuffer(4 << 20)
		b.Cleanup(func() { tx.Close(); rx.Close() })
	}
	to := rx.LocalAddr().(*net.UDPAddr)
	got := drainer(b, rx)
	h := floorHeader()
	payload := make([]byte, floorPayload)
	plain := make([]byte, 0, 1500)
	dst := make([]byte, 1500)
	b.SetBytes(1200)
	b.ReportAllocs()
	b.ResetTimer()
	cpu := startCPU(b)
	for i := 0; i < b.N; i++ {
		h.SequenceNumber++
		n, _ := h.MarshalTo(plain[:cap(plain)])
		plain = append(plain[:n], payload...)
		out, err := ctx.EncryptRTP(dst, plain, &h)
		if err != nil {
			b.Fatal(err)
		}
		dst = out[:cap(out)]
		if err := send(tx, to, out); err != nil {
			b.Fatal(err)
		}
	}
	cpu.pause()
	b.StopTimer()
	cpu.report(b)
	// Loopback drops what the reader could not keep up with; the sender paid
	// for those packets all the same, so the figure stands, but say so.
	time.Sleep(10 * time.Millisecond)
	b.ReportMetric(float64(got.Load())/float64(b.N), "delivered/op")
}

// BenchmarkFloorSendmmsg is what batching would give: SRTP protect each packet,
// then one sendmmsg(2) for a batch of 50 (one incoming packet fanned out to 50
// subscribers on a shared socket), reported per packet. The kernel still does
// the UDP/IP and loopback delivery work for every datagram; what is saved is the
// per-call entry and exit and Go's netpoll bookkeeping.
func BenchmarkFloorSendmmsg(b *testing.B) {
	fp := floorProfiles[2]
	b.Run(fp.name, func(b *testing.B) {
		const batch = 50
		ctx := srtpContext(b, fp.profile)
		rx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			b.Fatal(err)
		}
		tx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			b.Fatal(err)
		}
		_ = rx.SetReadBuffer(4 << 20)
		_ = tx.SetWriteBuffer(4 << 20)
		b.Cleanup(func() { tx.Close() })
		got := drainer(b, rx)
		pc := ipv4.NewPacketConn(tx)
		to := rx.LocalAddr()
		msgs := make([]ipv4.Message, batch)
		bufs := make([][]byte, batch)
		for i := range msgs {
			bufs[i] = make([]byte, 1500)
			msgs[i].Buffers = [][]byte{nil}
			msgs[i].Addr = to
		}
		h := floorHeader()
		payload := make([]byte, floorPayload)
		plain := make([]byte, 0, 1500)
		b.SetBytes(1200)
		b.ReportAllocs()
		b.ResetTimer()
		cpu := startCPU(b)
		for done := 0; done < b.N; {
			k := min(batch, b.N-done)
			for i := 0; i < k; i++ {
				h.SequenceNumber++
				n, _ := h.MarshalTo(plain[:cap(plain)])
				plain = append(plain[:n], payload...)
				out, err := ctx.EncryptRTP(bufs[i], plain, &h)
				if err != nil {
					b.Fatal(err)
				}
				msgs[i].Buffers[0] = out
			}
			for sent := 0; sent < k; {
				n, err := pc.WriteBatch(msgs[sent:k], 0)
				if err != nil {
					b.Fatal(err)
				}
				sent += n
			}
			done += k
		}
		cpu.pause()
		b.StopTimer()
		cpu.report(b)
		time.Sleep(10 * time.Millisecond)
		b.ReportMetric(float64(got.Load())/float64(b.N), "delivered/op")
	})
}

// BenchmarkFloorReceive is the receive floor the load generator's subscribers
// pay: one recv(2) of a 1200-byte SRTP packet and SRTP unprotect. The packets are
// queued on the socket while the timer is stopped, so the figure is the
// receiver's cost alone, not the speed of a sender racing it.
func BenchmarkFloorReceive(b *testing.B) {
	for _, fp := range floorProfiles {
		b.Run(fp.name, func(b *testing.B) {
			// Sender and receiver contexts from one key and salt.
			kl, _ := fp.profile.KeyLen()
			sl, _ := fp.profile.SaltLen()
			key := make([]byte, kl)
			salt := make([]byte, sl)
			_, _ = rand.Read(key)
			_, _ = rand.Read(salt)
			enc, err := srtp.CreateContext(key, salt, fp.profile)
			if err != nil {
				b.Fatal(err)
			}
			dec, err := srtp.CreateContext(key, salt, fp.profile, srtp.SRTPReplayProtection(64))
			if err != nil {
				b.Fatal(err)
			}
			tx, rx := connectedPair(b)
			// A lost datagram would block Read forever: fail instead.
			_ = rx.SetReadDeadline(time.Now().Add(10 * time.Minute))
			// A batch that fits the receive buffer (truesize per 1200-byte
			// datagram on loopback is about 2.3 KB).
			const batch = 256
			h := floorHeader()
			payload := make([]byte, floorPayload)
			packets := make([][]byte, batch)
			buf := make([]byte, 1500)
			plainOut := make([]byte, 1500)
			var rh rtp.Header
			b.SetBytes(1200)
			b.ReportAllocs()
			b.ResetTimer()
			cpu := startCPU(b)
			for done := 0; done < b.N; {
				cpu.pause()
				b.StopTimer()
				k := min(batch, b.N-done)
				for i := 0; i < k; i++ {
					h.SequenceNumber++
					plain, _ := h.Marshal()
					plain = append(plain, payload...)
					packets[i], _ = enc.EncryptRTP(packets[i][:0], plain, &h)
					if _, err := tx.Write(packets[i]); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				cpu.resume()
				for i := 0; i < k; i++ {
					n, err := rx.Read(buf)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := dec.DecryptRTP(plainOut, buf[:n], &rh); err != nil {
						b.Fatal(err)
					}
				}
				done += k
			}
			cpu.pause()
			cpu.report(b)
		})
	}
}
