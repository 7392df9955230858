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

	"github.com/petrel-sfu/petrel/bench/floor"
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
		c0 := floor.ThreadCPU()
		for i := 0; i < k; i++ {
			n, from, err := l.conn.ReadFromUDPAddrPort(buf)
			if err != nil {
				b.Fatal(err)
			}
			l.handle(buf[:n], from, time.Now())
		}
		cpu += floor.ThreadCPU() - c0
		done += k
	}
	b.StopTimer()
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	if got := tot.Packets.Load(); got != uint64(b.N) || l.authFail != 0 {
		b.Fatalf("counted %d of %d packets, %d failed to decrypt", got, b.N, l.authFail)
	}
}

// BenchmarkLeanSharedReceive is the receive loop lean viewers really run on
// loopback: 400 viewers on the one shared socket, drained with recvmmsg(2)
// in batches of up to 64 and handed to each viewer by its address, own
// AES-GCM decrypt in place, accounting. Packets are queued round-robin over
// the viewers with the timer stopped, so cpu-ns/op is the reader's own cost
// per packet; compare with bench/'s FloorReceive/AES256GCM.
func BenchmarkLeanSharedReceive(b *testing.B) {
	sh, err := newLeanShared("127.0.0.1", 0)
	if err != nil {
		b.Skip("shared socket:", err)
	}
	defer sh.Close()
	_ = syscall.SetsockoptInt(sh.fd, syscall.SOL_SOCKET, syscall.SO_RCVBUF, 8<<20)
	prof := srtp.ProtectionProfileAeadAes256Gcm
	key, salt := make([]byte, 32), make([]byte, 12)
	_, _ = rand.Read(key)
	_, _ = rand.Read(salt)
	enc, err := srtp.CreateContext(key, salt, prof)
	if err != nil {
		b.Fatal(err)
	}
	cert, err := NewLeanCert()
	if err != nil {
		b.Fatal(err)
	}
	tx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	defer tx.Close()
	_ = tx.SetWriteBuffer(8 << 20)
	const viewers = 400
	var tot Counters
	peers := make([]*leanPeer, viewers)
	for i := range peers {
		l, err := newLeanPeer(NewPeer("bench", "subscriber", &tot), cert, "", sh)
		if err != nil {
			b.Fatal(err)
		}
		l.ans = &leanAnswer{}
		l.ans.pts[96] = leanPT{kind: "video", clock: 90000}
		l.remote = tx.LocalAddr().(*net.UDPAddr).AddrPort()
		l.tx = enc
		l.lastRR = time.Now()
		g, err := newGCMRx(prof, key, salt)
		if err != nil {
			b.Fatal(err)
		}
		l.grx.Store(g)
		sh.activate(l)
		peers[i] = l
	}
	defer func() {
		for _, l := range peers {
			sh.remove(l)
		}
	}()
	// Every viewer gets the same stream (one SSRC, one key): what differs
	// per packet is the destination, as in a stream run.
	const batch = 512
	h := rtp.Header{Version: 2, PayloadType: 96, SequenceNumber: 1, Timestamp: 90000, SSRC: 0x1234abcd}
	payload := make([]byte, 1200-12)
	var pkt []byte
	b.SetBytes(1200)
	b.ReportAllocs()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ResetTimer()
	var cpu time.Duration
	next := 0
	for done := 0; done < b.N; {
		b.StopTimer()
		k := min(batch, b.N-done)
		for i := 0; i < k; i++ {
			if next%viewers == 0 {
				h.SequenceNumber++
				h.Marker = h.SequenceNumber%8 == 0
				if h.Marker {
					h.Timestamp += 3000
				}
				putStamp(payload, uint32(h.SequenceNumber), time.Now())
				plain, _ := h.Marshal()
				pkt, _ = enc.EncryptRTP(pkt[:0], append(plain, payload...), &h)
			}
			if _, err := tx.WriteToUDPAddrPort(pkt, peers[next%viewers].laddr); err != nil {
				b.Fatal(err)
			}
			next++
		}
		b.StartTimer()
		c0 := floor.ThreadCPU()
		for got := 0; got < k; {
			n := sh.recv()
			if n == 0 {
				b.Fatalf("%d of %d packets queued", got, k)
			}
			sh.deliver(n)
			got += n
		}
		cpu += floor.ThreadCPU() - c0
		done += k
	}
	b.StopTimer()
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	if got := tot.Packets.Load(); got != uint64(b.N) {
		b.Fatalf("counted %d of %d packets", got, b.N)
	}
}
