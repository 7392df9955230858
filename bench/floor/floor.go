// Package floor measures the machine's forwarding floors outside a benchmark
// binary, so that a load run can compare a server's CPU per forwarded packet,
// and the generator's per received packet, with floors measured minutes apart
// on the same machine. Sending: one AES-256-GCM SRTP protect of a 1200-byte
// RTP packet and one sendto(2) of it on an unconnected loopback socket (what a
// shared ICE socket does), to a socket that a goroutine drains. Receiving: one
// recv(2) of such a packet and its SRTP unprotect. bench/floor_test.go's
// BenchmarkFloorSendTo/AES256GCM and BenchmarkFloorReceive/AES256GCM are the
// same measurements as Go benchmarks.
package floor

import (
	"crypto/rand"
	"net"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/pion/rtp"
	"github.com/pion/srtp/v3"
	"golang.org/x/sys/unix"
)

// Result is one measurement.
type Result struct {
	CPUPerPacket time.Duration // CPU time of the sending thread per packet
	Delivered    float64       // share of the packets the drainer read
}

// SendTo protects and sends n packets and returns the sending thread's CPU
// time per packet (ThreadCPU, the goroutine locked to its
// thread). On loopback the kernel delivers each datagram to the receiving
// socket inside the sender's sendto(2), so that work is in the figure.
func SendTo(n int) (Result, error) {
	ctx, _, err := contexts()
	if err != nil {
		return Result{}, err
	}
	loop := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}
	rx, err := net.ListenUDP("udp4", loop)
	if err != nil {
		return Result{}, err
	}
	tx, err := net.ListenUDP("udp4", loop)
	if err != nil {
		rx.Close()
		return Result{}, err
	}
	defer tx.Close()
	_ = rx.SetReadBuffer(4 << 20)
	_ = tx.SetWriteBuffer(4 << 20)
	got, stop := Drain(rx)
	defer stop()

	to := rx.LocalAddr().(*net.UDPAddr)
	src := newSource(ctx)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := ThreadCPU()
	for i := 0; i < n; i++ {
		out, err := src.next()
		if err != nil {
			return Result{}, err
		}
		if _, err := tx.WriteToUDP(out, to); err != nil {
			return Result{}, err
		}
	}
	cpu := ThreadCPU() - start
	time.Sleep(10 * time.Millisecond)
	return Result{CPUPerPacket: cpu / time.Duration(max(n, 1)), Delivered: float64(got.Load()) / float64(max(n, 1))}, nil
}

// Receive reads and decrypts n packets and returns the receiving thread's CPU
// time per packet. Packets are sent in batches that fit the receive buffer
// while the clock is stopped, so the figure is the receiver's cost alone.
func Receive(n int) (Result, error) {
	enc, dec, err := contexts()
	if err != nil {
		return Result{}, err
	}
	loop := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}
	rx, err := net.ListenUDP("udp4", loop)
	if err != nil {
		return Result{}, err
	}
	defer rx.Close()
	tx, err := net.DialUDP("udp4", nil, rx.LocalAddr().(*net.UDPAddr))
	if err != nil {
		return Result{}, err
	}
	defer tx.Close()
	_ = rx.SetReadBuffer(4 << 20)
	// A lost datagram would block a read for good: give up instead.
	_ = rx.SetReadDeadline(time.Now().Add(time.Minute))
	const batch = 256 // about 2.3 KB of buffer each on loopback
	src := newSource(enc)
	buf := make([]byte, 1500)
	out := make([]byte, 1500)
	var rh rtp.Header
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var cpu time.Duration
	for done := 0; done < n; {
		k := min(batch, n-done)
		for i := 0; i < k; i++ {
			b, err := src.next()
			if err != nil {
				return Result{}, err
			}
			if _, err := tx.Write(b); err != nil {
				return Result{}, err
			}
		}
		start := ThreadCPU()
		for i := 0; i < k; i++ {
			m, err := rx.Read(buf)
			if err != nil {
				return Result{}, err
			}
			if _, err := dec.DecryptRTP(out, buf[:m], &rh); err != nil {
				return Result{}, err
			}
		}
		cpu += ThreadCPU() - start
		done += k
	}
	return Result{CPUPerPacket: cpu / time.Duration(max(n, 1)), Delivered: 1}, nil
}

// source makes the floor's packets: 1200-byte RTP packets, SRTP-protected
// into one reused buffer.
type source struct {
	ctx     *srtp.Context
	h       rtp.Header
	payload []byte
	plain   []byte
	sealed  []byte
}

func newSource(ctx *srtp.Context) *source {
	return &source{ctx: ctx, h: rtp.Header{Version: 2, PayloadType: 96, SequenceNumber: 1, Timestamp: 90000, SSRC: 0x1234abcd},
		payload: make([]byte, 1200-12), plain: make([]byte, 0, 1500), sealed: make([]byte, 1500)}
}

// next returns the next packet, valid until the next call.
func (s *source) next() ([]byte, error) {
	s.h.SequenceNumber++
	k, _ := s.h.MarshalTo(s.plain[:cap(s.plain)])
	s.plain = append(s.plain[:k], s.payload...)
	out, err := s.ctx.EncryptRTP(s.sealed, s.plain, &s.h)
	if err != nil {
		return nil, err
	}
	s.sealed = out[:cap(out)]
	return out, nil
}

// contexts returns a sending and a receiving AES-256-GCM SRTP context with one
// random key and salt.
func contexts() (enc, dec *srtp.Context, err error) {
	p := srtp.ProtectionProfileAeadAes256Gcm
	kl, _ := p.KeyLen()
	sl, _ := p.SaltLen()
	key, salt := make([]byte, kl), make([]byte, sl)
	_, _ = rand.Read(key)
	_, _ = rand.Read(salt)
	if enc, err = srtp.CreateContext(key, salt, p); err != nil {
		return nil, nil, err
	}
	dec, err = srtp.CreateContext(key, salt, p, srtp.SRTPReplayProtection(64))
	return enc, dec, err
}

// Drain reads and discards everything rx receives, on its own goroutine (the
// other core), as a subscriber's kernel and application would, and counts the
// datagrams. stop closes rx and waits for the goroutine.
func Drain(rx *net.UDPConn) (got *atomic.Int64, stop func()) {
	got = new(atomic.Int64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 1500)
		for {
			if _, err := rx.Read(buf); err != nil {
				return
			}
			got.Add(1)
		}
	}()
	return got, func() { rx.Close(); <-done }
}

// ThreadCPU is the CPU time of the calling OS thread: with the goroutine
// locked to its thread, what an operation cost, which load on a shared machine
// does not inflate. It reads CLOCK_THREAD_CPUTIME_ID, which includes the
// running slice; getrusage(RUSAGE_THREAD) does not, so a loop that never
// blocks for a few milliseconds read as nearly free (CI once measured 93 ns
// for a receive and decrypt).
func ThreadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
