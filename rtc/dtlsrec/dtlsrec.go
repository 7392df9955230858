// Package dtlsrec reads and writes DTLS 1.2 application data records itself,
// once pion/dtls has made the handshake.
//
// pion/dtls costs a data channel two goroutine hand-offs per record read
// (its read loop, then the decrypted-record channel) and a goroutine per
// record read or written (netctx starts one to watch each call's context).
// Conn is the DTLS connection's transport for pion/dtls, and after the
// handshake it is also the connection's application data path: Read takes
// a datagram from the transport on the caller's goroutine and opens its
// record; Write seals a record and writes it. The keys come from the master
// secret pion/dtls exports (dtls.State.MarshalBinary) and the TLS 1.2 PRF.
// Everything that is not application data of the current epoch (alerts, a
// retransmitted handshake flight) goes to pion/dtls, which answers it, until
// the peer's first application data record shows it finished the handshake:
// pion/dtls is then closed (its goroutines with it) and alerts read here.
//
// Only AES-GCM suites are handled here (what browsers and Pion negotiate);
// for another suite Handoff fails and the caller keeps pion/dtls's Conn.
package dtlsrec

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/binary"
	"encoding/gob"
	"errors"
	"hash"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/dtls/v3"
)

const (
	headerSize  = 13
	nonceSize   = 8 // the explicit part, carried in the record
	tagSize     = 16
	overhead    = Overhead
	typeAlert   = 21
	typeAppData = 23
	// Alert level fatal and description close_notify (RFC 5246 7.2).
	alertFatal       = 2
	alertCloseNotify = 0
	maxDatagram      = 1 << 14
	replayWindow     = 16384 // records this far behind the newest are still taken (a reordering link)
	// seqOffset puts the sequence numbers of records written here above
	// pion/dtls's own, which it may still use for an alert: a sequence
	// number is the AES-GCM nonce, and must never be used twice. Firefox
	// (NSS) drops records whose number jumps by 2^40; 2^16 it takes.
	seqOffset = 1 << 16
	// shimQueue is how many datagrams wait for pion/dtls at most (more are
	// dropped, as a full socket would).
	shimQueue = 256
)

// Overhead is what a record adds to the data it carries (AES-GCM: header,
// explicit nonce, tag).
const Overhead = headerSize + nonceSize + tagSize

// ErrUnsupported: the negotiated cipher suite is not one Conn handles.
var ErrUnsupported = errors.New("dtlsrec: cipher suite not handled")

// Stats counts what Read dropped.
type Stats struct {
	Forged   uint64 // records that did not authenticate
	Replayed uint64 // records seen before, or too old to tell
	Other    uint64 // records handed to pion/dtls after the handoff
}

type keys struct {
	seal, open     cipher.AEAD
	sealIV, openIV [4]byte
	epoch          uint16 // both directions use the handshake's final epoch
}

// Conn is one DTLS connection's transport and, after Handoff, its
// application data path.
type Conn struct {
	pc     net.PacketConn
	queued interface{ Queued() int } // pc, if it tells (Queued, once a packet)
	raddr  net.Addr
	shim   shim

	rmu     sync.Mutex // one reader of pc at a time: the pump, then Read
	k       atomic.Pointer[keys]
	rnonce  [12]byte    // open's nonce and additional data: a local array
	raad    [13]byte    // passed to the AEAD interface escapes, 2 allocations a record
	pending chan []byte // application data not read from pc by Read
	replay  struct {
		top  uint64
		mask [replayWindow / 64]uint64
	}
	stats struct{ forged, replayed, other atomic.Uint64 }

	wmu    sync.Mutex
	wseq   uint64
	wnonce [12]byte // Write's, as rnonce and raad
	waad   [13]byte

	// dc is the handed-off pion/dtls connection; detached: it is closed,
	// since the peer's first application data record proved it finished
	// the handshake (no flight of it will be retransmitted), and let go
	// of, with its handshake state.
	dc        atomic.Pointer[dtls.Conn]
	dropped   func() // OnDropped's
	detached  atomic.Bool
	notify    atomic.Pointer[func()] // OnQueued's
	ready     chan struct{}          // closed by Handoff
	done      chan struct{}
	closeOnce sync.Once
}

// bufs lends Read and Write a datagram buffer for one record: a connection
// holds none of its own, since most are quiet most of the time (a room's
// data sessions) and 32 KiB each of a thousand is 32 MB.
var bufs = sync.Pool{New: func() any { b := make([]byte, maxDatagram+overhead); return &b }}

// New makes the transport of a DTLS connection to raddr over pc. Give
// Transport() to dtls.Server or dtls.Client, then call Handoff after the
// handshake.
func New(pc net.PacketConn, raddr net.Addr) *Conn {
	c := &Conn{pc: pc, raddr: raddr, pending: make(chan []byte, 64), ready: make(chan struct{}), done: make(chan struct{})}
	c.queued, _ = pc.(interface{ Queued() int })
	c.shim = shim{c: c, wake: make(chan struct{}, 1), failed: make(chan struct{}), dlWake: make(chan struct{}, 1)}
	go c.pump()
	return c
}

// Queued is how many datagrams wait for Read, if the transport tells
// (lean.PacketConn does), or 0.
func (c *Conn) Queued() int {
	n := len(c.pending)
	if c.queued != nil {
		n += c.queued.Queued()
	}
	return n
}

// Transport is the PacketConn pion/dtls runs on.
func (c *Conn) Transport() net.PacketConn { return &c.shim }

// pump reads the transport for pion/dtls until the handoff.
func (c *Conn) pump() {
	buf := make([]byte, maxDatagram)
	for {
		c.rmu.Lock()
		if c.k.Load() != nil {
			c.rmu.Unlock()
			return
		}
		n, again, err := c.readTransport(buf)
		if again {
			c.rmu.Unlock()
			continue
		}
		if err != nil {
			c.rmu.Unlock()
			return
		}
		if c.k.Load() != nil {
			// The handoff came while this read waited: its data is Read's.
			if p, ok := c.records(buf[:n]); ok {
				c.inject(p)
			}
			c.rmu.Unlock()
			return
		}
		c.rmu.Unlock()
		c.shim.push(append([]byte(nil), buf[:n]...))
	}
}

// exported is what dtls.State.MarshalBinary carries that Conn needs (gob
// matches fields by name).
type exported struct {
	LocalEpoch, RemoteEpoch     uint16
	LocalRandom, RemoteRandom   [32]byte
	CipherSuiteID               uint16
	MasterSecret                []byte
	SequenceNumber              uint64
	RemoteSequenceNumber        uint64
	IsClient, HandshakeComplete bool
}

// Handoff takes over application data from dc, whose handshake is done and
// which runs on Transport(). On ErrUnsupported dc stays the connection.
func (c *Conn) Handoff(dc *dtls.Conn) error {
	st, ok := dc.ConnectionState()
	if !ok {
		return errors.New("dtlsrec: no connection state")
	}
	raw, err := st.MarshalBinary()
	if err != nil {
		return err
	}
	var e exported
	if err := gob.NewDecoder(bytes.NewReader(raw)).Decode(&e); err != nil {
		return err
	}
	if !e.HandshakeComplete || e.LocalEpoch != e.RemoteEpoch || e.LocalEpoch == 0 {
		return errors.New("dtlsrec: handshake not complete")
	}
	var keyLen int
	var h func() hash.Hash
	switch e.CipherSuiteID {
	case 0xc02b, 0xc02f: // TLS_ECDHE_{ECDSA,RSA}_WITH_AES_128_GCM_SHA256
		keyLen, h = 16, sha256.New
	case 0xc02c, 0xc030: // TLS_ECDHE_{ECDSA,RSA}_WITH_AES_256_GCM_SHA384
		keyLen, h = 32, sha512.New384
	default:
		return ErrUnsupported
	}
	clientRandom, serverRandom := e.RemoteRandom, e.LocalRandom
	if e.IsClient {
		clientRandom, serverRandom = e.LocalRandom, e.RemoteRandom
	}
	// RFC 5246 6.3: client key, server key, client IV, server IV.
	seed := append(append([]byte("key expansion"), serverRandom[:]...), clientRandom[:]...)
	block := prf(h, e.MasterSecret, seed, 2*keyLen+8)
	clientKey, serverKey := block[:keyLen], block[keyLen:2*keyLen]
	clientIV, serverIV := block[2*keyLen:2*keyLen+4], block[2*keyLen+4:]
	sealKey, openKey, sealIV, openIV := serverKey, clientKey, serverIV, clientIV
	if e.IsClient {
		sealKey, openKey, sealIV, openIV = clientKey, serverKey, clientIV, serverIV
	}
	k := &keys{epoch: e.LocalEpoch}
	if k.seal, err = gcm(sealKey); err != nil {
		return err
	}
	if k.open, err = gcm(openKey); err != nil {
		return err
	}
	copy(k.sealIV[:], sealIV)
	copy(k.openIV[:], openIV)
	c.wmu.Lock()
	c.wseq = e.SequenceNumber + seqOffset
	c.wmu.Unlock()
	// What pion/dtls saw is not accepted again: RemoteSequenceNumber is one
	// past the highest sequence number it took.
	if e.RemoteSequenceNumber > 0 {
		c.replay.top = e.RemoteSequenceNumber - 1
		for i := range c.replay.mask {
			c.replay.mask[i] = ^uint64(0)
		}
	}
	c.dc.Store(dc)
	c.k.Store(k)
	close(c.ready)
	// Application data pion/dtls decrypted before the handoff (and any it
	// is handed after: none, while the peer keeps to one epoch) is Read's.
	go func() {
		buf := make([]byte, maxDatagram)
		for {
			n, err := dc.Read(buf)
			if err != nil {
				if !c.detached.Load() {
					c.Close()
				}
				return
			}
			c.inject(append([]byte(nil), buf[:n]...))
		}
	}()
	return nil
}

func gcm(key []byte) (cipher.AEAD, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

// prf is TLS 1.2's P_hash (RFC 5246 5), n bytes of it.
func prf(h func() hash.Hash, secret, seed []byte, n int) []byte {
	out := make([]byte, 0, n+64)
	mac := hmac.New(h, secret)
	mac.Write(seed)
	a := mac.Sum(nil)
	for len(out) < n {
		mac.Reset()
		mac.Write(a)
		mac.Write(seed)
		out = mac.Sum(out)
		mac.Reset()
		mac.Write(a)
		a = mac.Sum(a[:0])
	}
	return out[:n]
}

// inject queues application data for Read and wakes it if it waits for
// the transport (a read deadline in the past ends that wait).
func (c *Conn) inject(p []byte) {
	select {
	case c.pending <- p:
	default: // a full queue drops: SCTP resends
	}
	c.pc.SetReadDeadline(time.Unix(1, 0))
	if f := c.notify.Load(); f != nil {
		(*f)()
	}
}

// OnQueued has f called when application data is queued for Read other
// than by the transport (what pion/dtls decrypted before the handoff): a
// TryRead caller that drains on the transport's pushes hears of it too.
func (c *Conn) OnQueued(f func()) { c.notify.Store(&f) }

// readTransport reads one datagram; called with rmu held. again: inject's
// kick ended the read (the deadline is cleared; look at pending, read
// again). Any other error ends pion/dtls's transport too.
func (c *Conn) readTransport(buf []byte) (n int, again bool, err error) {
	n, _, err = c.pc.ReadFrom(buf)
	if err == nil {
		return n, false, nil
	}
	var ne net.Error
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		c.pc.SetReadDeadline(time.Time{})
		return 0, true, nil
	}
	if err != nil {
		c.shim.fail(err)
	}
	return n, false, err
}

// Read returns the next application data record's content. Before Handoff
// it waits for it.
func (c *Conn) Read(b []byte) (int, error) {
	for {
		select {
		case p := <-c.pending:
			return copy(b, p), nil
		case <-c.done:
			return 0, io.EOF
		default:
		}
		if c.k.Load() == nil {
			select {
			case p := <-c.pending:
				return copy(b, p), nil
			case <-c.done:
				return 0, io.EOF
			case <-c.ready:
				continue
			}
		}
		c.rmu.Lock()
		select {
		case p := <-c.pending: // queued while this call waited for rmu
			c.rmu.Unlock()
			return copy(b, p), nil
		default:
		}
		buf := bufs.Get().(*[]byte)
		n, again, err := c.readTransport(*buf)
		if again || err != nil {
			bufs.Put(buf)
			c.rmu.Unlock()
			if again {
				continue
			}
			return 0, err
		}
		p, ok := c.records((*buf)[:n])
		var k int
		if ok {
			k = copy(b, p)
		}
		bufs.Put(buf)
		c.rmu.Unlock()
		if ok {
			return k, nil
		}
	}
}

// records opens a datagram's application data records, in place. The first
// one's content is returned; any more are queued. The rest goes to
// pion/dtls. Called with rmu held.
func (c *Conn) records(d []byte) (first []byte, ok bool) {
	k := c.k.Load()
	for len(d) >= headerSize {
		n := headerSize + int(binary.BigEndian.Uint16(d[11:]))
		if n > len(d) {
			return first, ok // truncated: dropped
		}
		rec := d[:n]
		d = d[n:]
		epoch := binary.BigEndian.Uint16(rec[3:])
		if rec[0] != typeAppData || epoch != k.epoch {
			c.stats.other.Add(1)
			if !c.detached.Load() {
				c.shim.push(append([]byte(nil), rec...))
			} else if rec[0] == typeAlert && epoch == k.epoch {
				c.alert(k, rec)
			}
			continue
		}
		p, good := c.open(k, rec)
		if !good {
			continue
		}
		if !c.detached.Load() && c.dc.Load() != nil && !c.detached.Swap(true) { // a load a record, not a write
			go c.dropDTLS()
		}
		if !ok {
			first, ok = p, true
		} else {
			c.inject(append([]byte(nil), p...))
		}
	}
	return first, ok
}

// dropDTLS closes the handed-off pion/dtls connection without telling the
// peer: its three goroutines and its state stay no longer than the
// handshake needs them. Alerts are read here from then on (alert).
func (c *Conn) dropDTLS() {
	c.shim.muted.Store(true)
	c.shim.fail(net.ErrClosed)
	if dc := c.dc.Swap(nil); dc != nil {
		_ = dc.Close()
	}
	if f := c.dropped; f != nil {
		c.dropped = nil // it may hold the connection too
		f()
	}
}

// OnDropped has f called once pion/dtls's connection is closed and let go
// of, so that its owner lets go of it too. Call it before Handoff.
func (c *Conn) OnDropped(f func()) { c.dropped = f }

// alert reads an alert record of the current epoch once pion/dtls is gone:
// close_notify or a fatal alert ends the connection; a forged one is
// dropped.
func (c *Conn) alert(k *keys, rec []byte) {
	p, good := c.open(k, rec)
	if good && len(p) == 2 && (p[0] == alertFatal || p[1] == alertCloseNotify) {
		c.Close()
	}
}

// TryRead is Read that does not wait: ok is false when no record is
// queued, so a caller needs no goroutine blocked in Read. It needs a
// transport that tells what it holds (Queued: lean.PacketConn).
func (c *Conn) TryRead(b []byte) (n int, ok bool, err error) {
	for {
		select {
		case p := <-c.pending:
			return copy(b, p), true, nil
		case <-c.done:
			return 0, false, io.EOF
		default:
		}
		if c.k.Load() == nil || c.queued == nil || c.queued.Queued() == 0 {
			return 0, false, nil
		}
		c.rmu.Lock()
		buf := bufs.Get().(*[]byte)
		n, again, err := c.readTransport(*buf)
		if again || err != nil {
			bufs.Put(buf)
			c.rmu.Unlock()
			if again {
				continue
			}
			return 0, false, err
		}
		p, got := c.records((*buf)[:n])
		if got {
			n = copy(b, p)
		}
		bufs.Put(buf)
		c.rmu.Unlock()
		if got {
			return n, true, nil
		}
	}
}

// open authenticates and decrypts one application data record in place.
func (c *Conn) open(k *keys, rec []byte) ([]byte, bool) {
	if len(rec) < overhead {
		c.stats.forged.Add(1)
		return nil, false
	}
	seq := binary.BigEndian.Uint64(rec[3:11]) & (1<<48 - 1)
	if c.seen(seq, false) {
		c.stats.replayed.Add(1)
		return nil, false
	}
	nonce, aad := &c.rnonce, &c.raad
	copy(nonce[:4], k.openIV[:])
	copy(nonce[4:], rec[headerSize:headerSize+nonceSize])
	copy(aad[:8], rec[3:11]) // epoch and sequence number
	aad[8], aad[9], aad[10] = rec[0], rec[1], rec[2]
	binary.BigEndian.PutUint16(aad[11:], uint16(len(rec)-overhead))
	ct := rec[headerSize+nonceSize:]
	p, err := k.open.Open(ct[:0], nonce[:], ct, aad[:])
	if err != nil {
		c.stats.forged.Add(1)
		return nil, false
	}
	c.seen(seq, true)
	return p, true
}

// seen checks (and with mark, records) a sequence number in the replay
// window (RFC 6347 4.1.2.6): a ring of replayWindow bits, bit seq mod
// replayWindow for each sequence number from top-replayWindow+1 to top.
func (c *Conn) seen(seq uint64, mark bool) bool {
	r := &c.replay
	bit := func(s uint64) (*uint64, uint64) { i := s % replayWindow; return &r.mask[i/64], 1 << (i % 64) }
	if seq > r.top {
		if mark {
			if seq-r.top >= replayWindow {
				clear(r.mask[:])
			} else {
				for s := r.top + 1; s < seq; s++ {
					w, b := bit(s)
					*w &^= b
				}
			}
			w, b := bit(seq)
			*w |= b
			r.top = seq
		}
		return false
	}
	if r.top-seq >= replayWindow {
		return true
	}
	w, b := bit(seq)
	was := *w&b != 0
	if mark {
		*w |= b
	}
	return was
}

// maxSeq is the last 48-bit record sequence number; DTLS forbids wrapping
// (RFC 6347 4.1), and WebRTC does not renegotiate, so the connection ends.
const maxSeq = 1<<48 - 1

// ErrSequenceExhausted is what Write returns once every sequence number of
// the epoch was used; the connection is closed then.
var ErrSequenceExhausted = errors.New("dtlsrec: record sequence numbers exhausted")

// Write seals b as one application data record and sends it.
func (c *Conn) Write(b []byte) (int, error) {
	k := c.k.Load()
	if k == nil {
		return 0, errors.New("dtlsrec: write before the handoff")
	}
	if len(b) > maxDatagram {
		return 0, errors.New("dtlsrec: record too large")
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	seq := c.wseq
	if seq > maxSeq {
		c.Close()
		return 0, ErrSequenceExhausted
	}
	c.wseq++
	buf := bufs.Get().(*[]byte)
	defer bufs.Put(buf)
	w := (*buf)[:headerSize+nonceSize]
	w[0], w[1], w[2] = typeAppData, 0xfe, 0xfd
	binary.BigEndian.PutUint64(w[3:11], uint64(k.epoch)<<48|seq)
	binary.BigEndian.PutUint16(w[11:], uint16(nonceSize+len(b)+tagSize))
	copy(w[headerSize:], w[3:11]) // the explicit nonce: epoch and sequence number
	nonce, aad := &c.wnonce, &c.waad
	copy(nonce[:4], k.sealIV[:])
	copy(nonce[4:], w[3:11])
	copy(aad[:8], w[3:11])
	aad[8], aad[9], aad[10] = w[0], w[1], w[2]
	binary.BigEndian.PutUint16(aad[11:], uint16(len(b)))
	w = k.seal.Seal(w, nonce[:], b, aad[:])
	if _, err := c.pc.WriteTo(w, c.raddr); err != nil {
		return 0, err
	}
	return len(b), nil
}

// Stats says what Read dropped or passed on.
func (c *Conn) Stats() Stats {
	return Stats{Forged: c.stats.forged.Load(), Replayed: c.stats.replayed.Load(), Other: c.stats.other.Load()}
}

// Close ends Read; the transport is its owner's.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() { close(c.done); c.shim.fail(net.ErrClosed) })
	return nil
}

func (c *Conn) LocalAddr() net.Addr              { return c.pc.LocalAddr() }
func (c *Conn) RemoteAddr() net.Addr             { return c.raddr }
func (c *Conn) SetDeadline(time.Time) error      { return nil }
func (c *Conn) SetReadDeadline(time.Time) error  { return nil }
func (c *Conn) SetWriteDeadline(time.Time) error { return nil }

// shim is the PacketConn pion/dtls reads (what the pump and Read pass on)
// and writes (to the transport).
type shim struct {
	c *Conn
	// q is what waits for pion/dtls: a slice that grows with what is queued
	// and is dropped once read, not a channel of shimQueue slots held by
	// every connection for its lifetime; wake tells ReadFrom.
	qmu    sync.Mutex
	q      [][]byte
	wake   chan struct{}
	mu     sync.Mutex
	err    error
	failed chan struct{}
	// A read deadline, as pion/dtls uses one to interrupt its reader and
	// then waits for it to return.
	dl     time.Time
	dlWake chan struct{}
	muted  atomic.Bool
}

func (s *shim) push(p []byte) {
	s.qmu.Lock()
	if len(s.q) < shimQueue { // else pion/dtls is not reading: dropped
		s.q = append(s.q, p)
	}
	s.qmu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// pop takes the oldest queued datagram.
func (s *shim) pop() ([]byte, bool) {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	if len(s.q) == 0 {
		return nil, false
	}
	p := s.q[0]
	s.q[0], s.q = nil, s.q[1:]
	if len(s.q) == 0 {
		s.q = nil
	}
	return p, true
}

func (s *shim) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
		close(s.failed)
	}
}

func (s *shim) ReadFrom(b []byte) (int, net.Addr, error) {
	for {
		s.mu.Lock()
		dl := s.dl
		s.mu.Unlock()
		var expire <-chan time.Time
		var t *time.Timer
		if !dl.IsZero() {
			d := time.Until(dl)
			if d <= 0 {
				return 0, nil, os.ErrDeadlineExceeded
			}
			t = time.NewTimer(d)
			expire = t.C
		}
		n, changed, err := s.wait(b, expire)
		if t != nil {
			t.Stop()
		}
		switch {
		case err != nil:
			return 0, nil, err
		case !changed:
			return n, s.c.raddr, nil
		}
	}
}

// wait is one ReadFrom until a datagram, failure, the deadline, or a new
// deadline (changed).
func (s *shim) wait(b []byte, expire <-chan time.Time) (n int, changed bool, err error) {
	for {
		if p, ok := s.pop(); ok {
			return copy(b, p), false, nil
		}
		select {
		case <-s.wake:
			continue
		case <-s.failed:
			s.mu.Lock()
			defer s.mu.Unlock()
			return 0, false, s.err
		case <-expire:
			return 0, false, os.ErrDeadlineExceeded
		case <-s.dlWake:
			return 0, true, nil
		}
	}
}

func (s *shim) WriteTo(b []byte, addr net.Addr) (int, error) {
	if s.muted.Load() {
		return len(b), nil // pion/dtls closing after dropDTLS: nothing goes out
	}
	return s.c.pc.WriteTo(b, addr)
}
func (s *shim) Close() error                  { s.fail(net.ErrClosed); return nil }
func (s *shim) LocalAddr() net.Addr           { return s.c.pc.LocalAddr() }
func (s *shim) SetDeadline(t time.Time) error { return s.SetReadDeadline(t) }
func (s *shim) SetReadDeadline(t time.Time) error {
	s.mu.Lock()
	s.dl = t
	s.mu.Unlock()
	select {
	case s.dlWake <- struct{}{}:
	default:
	}
	return nil
}
func (s *shim) SetWriteDeadline(time.Time) error { return nil }
