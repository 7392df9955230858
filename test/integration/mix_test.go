package integration

import (
	"bytes"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"

	"github.com/petrel-sfu/petrel/audio/opus"
	"github.com/petrel-sfu/petrel/auth"
	"github.com/petrel-sfu/petrel/client"
)

// publishTone publishes a sine tone of freq Hz, Opus-encoded in 20 ms frames.
func publishTone(t *testing.T, c *client.Client, freq float64) {
	t.Helper()
	track := opusTrack()
	if _, _, err := c.Publish(ctxT(t, 10*time.Second), track, "microphone"); err != nil {
		t.Fatal(err)
	}
	playTone(t, track, freq)
}

func opusTrack() *webrtc.TrackLocalStaticRTP {
	track, _ := webrtc.NewTrackLocalStaticRTP(webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2}, "mic", "a")
	return track
}

// playTone writes a sine tone of freq Hz to track, Opus in 20 ms frames,
// until the test ends.
func playTone(t *testing.T, track *webrtc.TrackLocalStaticRTP, freq float64) {
	t.Helper()
	enc, err := opus.NewEncoder(32000)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex // everyFrame's goroutine against the encoder's Close
	closed := false
	t.Cleanup(func() { mu.Lock(); closed = true; enc.Close(); mu.Unlock() })
	pcm := make([]int16, opus.FrameSamples)
	buf := make([]byte, opus.MaxPacket)
	everyFrame(t, func(n int) {
		for i := range pcm {
			pcm[i] = int16(6000 * math.Sin(2*math.Pi*freq*float64(n*opus.FrameSamples+i)/opus.Rate))
		}
		mu.Lock()
		defer mu.Unlock()
		if closed {
			return
		}
		m, err := enc.Encode(pcm, buf)
		if err != nil {
			return
		}
		_ = track.WriteRTP(&rtp.Packet{Header: rtp.Header{Version: 2, SequenceNumber: uint16(n), Timestamp: uint32(n * opus.FrameSamples)}, Payload: buf[:m]})
	})
}

// hearing counts a client's audio tracks and decodes the first one's PCM.
type hearing struct {
	mu     sync.Mutex
	tracks int
	pcm    []int16
}

func listen(t *testing.T, c *client.Client) *hearing {
	h := &hearing{}
	dec, err := opus.NewDecoder()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() { close(done); wg.Wait(); dec.Close() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			var tr client.Track
			select {
			case tr = <-c.Tracks:
			case <-done:
				return
			}
			if tr.Remote.Kind() != webrtc.RTPCodecTypeAudio {
				continue
			}
			h.mu.Lock()
			h.tracks++
			first := h.tracks == 1
			h.mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				h.decode(tr.Remote, dec, first, done)
			}()
		}
	}()
	return h
}

// decode reads tr until it ends or done, appending its decoded PCM to h's
// when keep (else only draining it).
func (h *hearing) decode(tr *webrtc.TrackRemote, dec *opus.Decoder, keep bool, done chan struct{}) {
	out := make([]int16, 6*opus.FrameSamples)
	for {
		p, _, err := tr.ReadRTP()
		if err != nil {
			return
		}
		select {
		case <-done:
			return
		default:
		}
		if !keep {
			continue
		}
		n, err := dec.Decode(p.Payload, out)
		if err != nil {
			continue
		}
		h.mu.Lock()
		h.pcm = append(h.pcm, out[:n]...)
		h.mu.Unlock()
	}
}

// whepListen plays room over WHEP, audio only, with token, and decodes what
// it receives.
func whepListen(t *testing.T, e *env, room, token string) *hearing {
	t.Helper()
	h := &hearing{}
	dec, err := opus.NewDecoder()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	tracks := make(chan *webrtc.TrackRemote, 2)
	pc, offer := pcOffer(t, func(pc *webrtc.PeerConnection) {
		_, _ = pc.AddTransceiverFromKind(webrtc.RTPCodecTypeAudio, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionRecvonly})
		pc.OnTrack(func(tr *webrtc.TrackRemote, _ *webrtc.RTPReceiver) { tracks <- tr })
	})
	// Cleanups run last-added first: the connection closes (ReadRTP returns)
	// before the decoder goes.
	t.Cleanup(func() { close(done); _ = pc.Close(); wg.Wait(); dec.Close() })
	resp, answer := post(t, e.url+"/whep/"+room, "application/sdp", token, offer)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("WHEP: %d %s", resp.StatusCode, answer)
	}
	if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: answer}); err != nil {
		t.Fatal(err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for first := true; ; first = false {
			select {
			case tr := <-tracks:
				h.mu.Lock()
				h.tracks++
				h.mu.Unlock()
				wg.Add(1)
				go func() {
					defer wg.Done()
					h.decode(tr, dec, first, done)
				}()
			case <-done:
				return
			}
		}
	}()
	return h
}

// goertzel is the power of x at freq, normalised by its length.
func goertzel(x []int16, freq float64) float64 {
	w := 2 * math.Pi * freq / opus.Rate
	k := 2 * math.Cos(w)
	var s1, s2 float64
	for _, v := range x {
		s := float64(v) + k*s1 - s2
		s2, s1 = s1, s
	}
	return (s1*s1 + s2*s2 - k*s1*s2) / float64(len(x)) / float64(len(x))
}

// Three people publish a tone each (440, 660, 880 Hz) into an audio-mixed
// room: each receives one audio track in which it hears the other two tones
// and not its own; a listener who publishes nothing hears all three.
func TestAudioMixMinusOne(t *testing.T) {
	e := start(t)
	mixedRoom(t, e, "mixroom")
	freqs := []float64{440, 660, 880}
	var hs []*hearing
	for i, f := range freqs {
		c := e.join("mixroom", string(rune('a'+i)))
		hs = append(hs, listen(t, c))
		publishTone(t, c, f)
	}
	lc := e.join("mixroom", "listener")
	hs = append(hs, listen(t, lc))
	names := []string{"a (440 Hz)", "b (660 Hz)", "c (880 Hz)", "listener"}
	hearAll(t, hs, names, append(freqs, 1100), func(i, j int) bool { return j < 3 && i != j })

	// The listener starts speaking (1100 Hz): from the shared mix it moves to
	// its own minus-one on the same track; the others hear it too.
	publishTone(t, lc, 1100)
	hearAll(t, hs, names, append(freqs, 1100), func(i, j int) bool { return i != j })
}

// hearAll lets the mix settle, decodes 1.5 s of what each client receives and
// checks that client i hears tone j exactly when want(i, j).
func hearAll(t *testing.T, hs []*hearing, names []string, freqs []float64, want func(i, j int) bool) {
	t.Helper()
	time.Sleep(time.Second) // the playout delay, joins and subscriptions
	for _, h := range hs {
		h.mu.Lock()
		h.pcm = h.pcm[:0]
		h.mu.Unlock()
	}
	time.Sleep(1500 * time.Millisecond)
	for i, h := range hs {
		h.mu.Lock()
		tracks, pcm := h.tracks, append([]int16(nil), h.pcm...)
		h.mu.Unlock()
		if tracks != 1 {
			t.Errorf("%s received %d audio tracks, want 1 (the mix)", names[i], tracks)
		}
		if len(pcm) < opus.Rate/2 { // half of it: a loaded host's loss
			t.Errorf("%s decoded %d samples in 1.5 s", names[i], len(pcm))
			continue
		}
		// The noise floor: the power between the tones.
		floor := goertzel(pcm, 550) + goertzel(pcm, 770) + goertzel(pcm, 990) + 1
		for j, f := range freqs {
			p := goertzel(pcm, f)
			heard := p > 100*floor
			t.Logf("%s: %g Hz power %.3g (floor %.3g)", names[i], f, p, floor)
			if heard != want(i, j) {
				t.Errorf("%s: hears %g Hz: %v, want %v", names[i], f, heard, want(i, j))
			}
		}
	}
}

// A SIP gateway's path into an audio-mixed room: a caller published over
// WHIP (440 Hz) joins the mix with a WebRTC client (660 Hz). The client hears
// the caller; the gateway's WHEP viewer with the caller's identity hears the
// client and not the caller (the caller's minus-one); a WHEP viewer of
// another identity hears both.
func TestAudioMixWHIPAndWHEP(t *testing.T) {
	e := start(t)
	mixedRoom(t, e, "sip")

	alice := e.join("sip", "alice")
	aliceHears := listen(t, alice)
	publishTone(t, alice, 660)

	// The caller: publish only, as a gateway's WHIP leg would be.
	track := opusTrack()
	pub, offer := pcOffer(t, func(pc *webrtc.PeerConnection) {
		if _, err := pc.AddTrack(track); err != nil {
			t.Fatal(err)
		}
	})
	resp, answer := post(t, e.url+"/whip/sip", "application/sdp", e.token("sip", "caller", auth.Grants{Publish: true}, time.Hour), offer)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("WHIP: %d %s", resp.StatusCode, answer)
	}
	if err := pub.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: answer}); err != nil {
		t.Fatal(err)
	}
	playTone(t, track, 440)
	// The caller is in the mix once alice hears it (its minus-one track is
	// made in the same pass).
	waitFor(t, 10*time.Second, "alice to hear the WHIP caller", func() bool {
		aliceHears.mu.Lock()
		defer aliceHears.mu.Unlock()
		n := len(aliceHears.pcm)
		return n > opus.Rate/2 && goertzel(aliceHears.pcm[n-opus.Rate/2:], 440) > 100*(goertzel(aliceHears.pcm[n-opus.Rate/2:], 550)+1)
	})

	gateway := whepListen(t, e, "sip", e.token("sip", "caller", auth.Grants{Subscribe: true}, time.Hour))
	watcher := whepListen(t, e, "sip", e.token("sip", "watcher", auth.Grants{Subscribe: true}, time.Hour))
	hearAll(t, []*hearing{aliceHears, gateway, watcher}, []string{"alice (660 Hz)", "the caller's WHEP", "another WHEP viewer"},
		[]float64{660, 440}, func(i, j int) bool {
			switch i {
			case 0:
				return j == 1 // alice: the caller
			case 1:
				return j == 0 // the caller: alice
			}
			return true // the watcher: both
		})
}

// playPackets writes a tone of freq Hz to track as Opus packets of ms
// milliseconds each, paced by the clock (a late sender catches up, so the
// sound sent has no gap), until the test ends.
func playPackets(t *testing.T, track *webrtc.TrackLocalStaticRTP, freq float64, ms int) {
	t.Helper()
	enc, err := opus.NewEncoder(32000)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() { close(stop); wg.Wait(); enc.Close() })
	samples := opus.Rate * ms / 1000
	pcm := make([]int16, samples)
	buf := make([]byte, opus.MaxPacket)
	wg.Add(1)
	go func() {
		defer wg.Done()
		start := time.Now()
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			case <-time.After(time.Until(start.Add(time.Duration(n*ms) * time.Millisecond))):
			}
			for i := range pcm {
				pcm[i] = int16(6000 * math.Sin(2*math.Pi*freq*float64(n*samples+i)/opus.Rate))
			}
			m, err := enc.EncodePacket(pcm, buf)
			if err != nil {
				t.Errorf("encode %d ms: %v", ms, err)
				return
			}
			_ = track.WriteRTP(&rtp.Packet{Header: rtp.Header{Version: 2, SequenceNumber: uint16(n), Timestamp: uint32(n * samples)}, Payload: buf[:m]})
		}
	}()
}

// toneWindows measures freq in each 20 ms window of pcm: its amplitude and
// phase (a Hann-windowed correlation, so that other tones far enough away
// do not leak in).
func toneWindows(pcm []int16, freq float64) (amp, phase []float64) {
	const w = opus.FrameSamples
	for at := 0; at+w <= len(pcm); at += w {
		var re, im float64
		for i := range w {
			h := 0.5 - 0.5*math.Cos(2*math.Pi*float64(i)/w)
			a := 2 * math.Pi * freq * float64(i) / opus.Rate
			v := h * float64(pcm[at+i])
			re += v * math.Cos(a)
			im -= v * math.Sin(a)
		}
		amp = append(amp, math.Hypot(re, im)*4/w)
		phase = append(phase, math.Atan2(im, re))
	}
	return amp, phase
}

// Publishers whose Opus packets are 40, 10 and 60 ms long (each a tone) are
// mixed without gaps or repeats: in every 20 ms of the mix a listener
// decodes, each tone has its level and its phase has moved on by exactly 20 ms.
func TestAudioMixPacketLengths(t *testing.T) {
	e := start(t)
	mixedRoom(t, e, "lengths")
	lc := e.join("lengths", "listener")
	h := listen(t, lc)
	type talker struct {
		freq float64
		ms   int
	}
	talkers := []talker{{430, 40}, {1070, 10}, {1610, 60}}
	for i, tk := range talkers {
		c := e.join("lengths", "t"+string(rune('0'+i)))
		track := opusTrack()
		if _, _, err := c.Publish(ctxT(t, 10*time.Second), track, "microphone"); err != nil {
			t.Fatal(err)
		}
		playPackets(t, track, tk.freq, tk.ms)
	}
	time.Sleep(1500 * time.Millisecond) // joins, subscriptions, the playout delay
	h.mu.Lock()
	h.pcm = h.pcm[:0]
	h.mu.Unlock()
	time.Sleep(2 * time.Second)
	h.mu.Lock()
	pcm := append([]int16(nil), h.pcm...)
	h.mu.Unlock()
	if len(pcm) < opus.Rate {
		t.Fatalf("the listener decoded %d samples in 2 s", len(pcm))
	}
	for _, tk := range talkers {
		amp, phase := toneWindows(pcm, tk.freq)
		med := append([]float64(nil), amp...)
		slices.Sort(med)
		level := med[len(med)/2]
		step := 2 * math.Pi * tk.freq * opus.FrameSamples / opus.Rate
		bad := 0
		var worst []string
		for i := 1; i < len(amp); i++ {
			d := math.Remainder(phase[i]-phase[i-1]-step, 2*math.Pi)
			if amp[i] < level/2 || amp[i] > level*2 || math.Abs(d) > 0.4 {
				bad++
				if len(worst) < 5 {
					worst = append(worst, fmt.Sprintf("window %d: level %.0f, phase off by %.2f rad", i, amp[i], d))
				}
			}
		}
		t.Logf("%g Hz in %d ms packets: level %.0f, %d of %d windows off %v", tk.freq, tk.ms, level, bad, len(amp)-1, worst)
		// A loaded host may lose a packet on the way to the listener: a few
		// windows, not a pattern.
		if level < 1000 || bad > (len(amp)-1)/20 {
			t.Errorf("%g Hz in %d ms packets is not continuous in the mix: level %.0f, %d of %d windows off: %v", tk.freq, tk.ms, level, bad, len(amp)-1, worst)
		}
	}
}

// mixedRoom creates room with audioMix through the admin API.
func mixedRoom(t *testing.T, e *env, room string) {
	t.Helper()
	admin := e.token("", "ops", auth.Grants{Admin: true}, time.Hour)
	req, _ := http.NewRequest("POST", e.url+"/v1/admin/rooms", bytes.NewBufferString(`{"name":"`+room+`","audioMix":true}`))
	req.Header.Set("Authorization", "Bearer "+admin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("create room: %s", resp.Status)
	}
}
