// Package floor measures the machine's forwarding floor outside a benchmark
// binary, so that a load run can compare a server's CPU per forwarded packet
// with the floor measured minutes apart on the same machine: one AES-256-GCM
// SRTP protect of a 1200-byte RTP packet and one sendto(2) of it on an
// unconnected loopback socket (what a shared ICE socket does), to a socket that
// a goroutine drains. bench/floor_test.go's BenchmarkFloorSendTo/AES256GCM is
// the same measurement as a Go benchmark.
package floor

import (
	"crypto/rand"
	"net"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pion/rtp"
	"github.com/pion/srtp/v3"
)

// Result is one measurement.
type Result struct {
	CPUPerPacket time.Duration // CPU time of the sending thread per packet
	Delivered    float64       // share of the packets the drainer read
}

// SendTo protects and sends n packets and returns the sending thread's CPU
// time per packet (getrusage RUSAGE_THREAD, the goroutine locked to its
// thread). On loopback the kernel delivers each datagram to the receiving
// socket inside the sender's sendto(2), so that work is in the figure.
func SendTo(n int) (Result, error) {
	p := srtp.ProtectionProfileAeadAes256Gcm
	kl, _ := p.KeyLen()
	sl, _ := p.SaltLen()
	key, salt := make([]byte, kl), make([]byte, sl)
	_, _ = rand.Read(key)
	_, _ = rand.Read(salt)
	ctx, err := srtp.CreateContext(key, salt, p)
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
	h := rtp.Header{Version: 2, PayloadType: 96, SequenceNumber: 1, Timestamp: 90000, SSRC: 0x1234abcd}
	payload := make([]byte, 1200-12)
	plain := make([]byte, 0, 1500)
	dst := make([]byte, 1500)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := threadCPU()
	for i := 0; i < n; i++ {
		h.SequenceNumber++
		k, _ := h.MarshalTo(plain[:cap(plain)])
		plain = append(plain[:k], payload...)
		out, err := ctx.EncryptRTP(dst, plain, &h)
		if err != nil {
			return Result{}, err
		}
		dst = out[:cap(out)]
		if _, err := tx.WriteToUDP(out, to); err != nil {
			return Result{}, err
		}
	}
	cpu := threadCPU() - start
	time.Sleep(10 * time.Millisecond)
	return Result{CPUPerPacket: cpu / time.Duration(max(n, 1)), Delivered: float64(got.Load()) / float64(max(n, 1))}, nil
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

// threadCPU is the CPU time of the calling OS thread.
func threadCPU() time.Duration {
	const rusageThread = 1 // RUSAGE_THREAD, Linux
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
