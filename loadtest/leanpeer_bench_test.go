package loadtest

import (
	"crypto/rand"
	"net"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/pion/rtp"
	"github.com/pion/srtp/v3"
)

// BenchmarkLeanReceive is a lean peer's whole receive path for one 1200-byte
// AES-256-GCM SRTP packet: the UDP receive, the first-byte demultiplexing, the
// decrypt and the accounting (sequence, loss, jitter, the synthetic stamp's
// delay, the run's counters). It is measured like bench/floor_test.go's
// BenchmarkFloorReceive (UDP receive + decrypt; packets sent in batches with
// the timer stopped, cpu-ns/op from the benchmark thread's own CPU time), so
// the two read as a ratio:
//
//	go test -run '^$' -bench 'LeanReceive' -benchmem ./loadtest/
//	go test -run '^$' -bench 'FloorReceive/AES256' -benchmem ./bench/
//
// pion: pion/srtp's DecryptRTP (what the AES-CM profile still uses); gcm:
// the generator's own AES-GCM receiver (srtpgcm.go, the default for GCM).
func BenchmarkLeanReceive(b *testing.B) {
	b.Run("pion", func(b *testing.B) { benchLeanReceive(b, false) })
	b.Run("gcm", func(b *testing.B) { benchLeanReceive(b, true) })
}

func benchLeanReceive(b *testing.B, gcm bool) {
	prof := srtp.ProtectionProfileAeadAes256Gcm
	kl, _ := prof.KeyLen()
	sl, _ := prof.SaltLen()
	key, salt := make([]byte, kl), make([]byte, sl)
	_, _ = rand.Read(key)
	_, _ = rand.Read(salt)
	enc, err := srtp.CreateContext(key, salt, prof)
	if err != nil {
		b.Fatal(err)
	}
	dec, err := srtp.CreateContext(key, salt, prof, srtp.SRTPReplayProtection(64))
	if err != nil {
		b.Fatal(err)
	}
	cert, err := NewLeanCert()
	if err != nil {
		b.Fatal(err)
	}
	var tot Counters
	p := NewPeer("bench", "subscriber", &tot)
	l, err := newLeanPeer(p, cert, "127.0.0.1", nil)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	tx, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(l.local()))
	if err != nil {
		b.Fatal(err)
	}
	defer tx.Close()
	_ = tx.SetWriteBuffer(4 << 20)
	_ = l.conn.SetReadBuffer(4 << 20)
	_ = l.conn.SetReadDeadline(time.Now().Add(10 * time.Minute))
	l.ans = &leanAnswer{}
	l.ans.pts[96] = leanPT{kind: "video", clock: 90000}
	l.remote = tx.LocalAddr().(*net.UDPAddr).AddrPort()
	l.tx = enc // RTCP out (a receiver report a second); any key will do
	l.lastRR = time.Now()
	l.rx.Store(dec)
	if gcm {
		g, err := newGCMRx(prof, key, salt)
		if err != nil || g == nil {
			b.Fatal(err)
		}
		l.grx.Store(g)
	}

	const batch = 256
	h := rtp.Header{Version: 2, PayloadType: 96, SequenceNumber: 1, Timestamp: 90000, SSRC: 0x1234abcd}
	payload := make([]byte, 1200-12)
	packets := make([][]byte, batch)
	buf := make([]byte, 1500)
	var frame uint32
	b.SetBytes(1200)
	b.ReportAllocs()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ResetTimer()
	var cpu time.Duration
	for done := 0; done < b.N; {
		b.StopTimer()
		k := min(batch, b.N-done)
		for i := 0; i < k; i++ {
			h.SequenceNumber++
			h.Marker = i%8 == 7
			if h.Marker {
				h.Timestamp += 3000
				frame++
			}
			putStamp(payload, frame, time.Now())
			plain, _ := h.Marshal()
			plain = append(plain, payload...)
			packets[i], _ = enc.EncryptRTP(packets[i][:0], plain, &h)
			if _, err := tx.Write(packets[i]); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		c0 := threadCPU()
		for i := 0; i < k; i++ {
			n, from, err := l.conn.ReadFromUDPAddrPort(buf)
			if err != nil {
				b.Fatal(err)
			}
			l.handle(buf[:n], from, time.Now())
		}
		cpu += threadCPU() - c0
		done += k
	}
	b.StopTimer()
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	if got := tot.Packets.Load(); got != uint64(b.N) || l.authFail != 0 {
		b.Fatalf("counted %d of %d packets, %d failed to decrypt", got, b.N, l.authFail)
	}
}

// threadCPU is the CPU time of the calling OS thread (Linux RUSAGE_THREAD).
func threadCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
