package loadtest

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"
)

// Sample is the state once a second.
type Sample struct {
	T            float64 `json:"t"` // seconds since start
	Phase        string  `json:"phase"`
	Peers        int     `json:"peers"` // peers with DTLS done and not failed
	Started      int     `json:"started"`
	Failed       int     `json:"failed"`
	PPS          float64 `json:"pps"` // packets received per second, all peers
	Kbps         float64 `json:"kbps"`
	Lost         int64   `json:"lost"`
	NACKsSent    uint64  `json:"nacksSent"`
	NACKsRecv    uint64  `json:"nacksReceived"`
	PLIsRecv     uint64  `json:"plisReceived"`
	TargetCPU    float64 `json:"targetCpu"` // % of one core
	TargetSys    float64 `json:"targetSys"` // of which in the kernel
	TargetRSSMiB float64 `json:"targetRssMiB"`
	SelfCPU      float64 `json:"selfCpu"`
	SelfRSSMiB   float64 `json:"selfRssMiB"`
	DelayP50Ms   float64 `json:"delayP50Ms"`
	DelayP99Ms   float64 `json:"delayP99Ms"`
}

// Summary aggregates a run.
type Summary struct {
	Peers             int                    `json:"peers"`
	Connected         int                    `json:"connected"`
	Failed            int                    `json:"failed"`
	Receiving         int                    `json:"receiving"` // peers that got at least one RTP packet
	SetupMs           map[string]Percentiles `json:"setupMs"`
	Packets           uint64                 `json:"packets"`
	Lost              int64                  `json:"lost"`
	LossPct           float64                `json:"lossPct"`
	NACKsSent         uint64                 `json:"nacksSent"`
	NACKsRecv         uint64                 `json:"nacksReceived"`
	PLIsRecv          uint64                 `json:"plisReceived"`
	JitterMs          float64                `json:"jitterMsMean"`
	DelayMs           Percentiles            `json:"delayMs"`    // steady window (whole run if it had none)
	DelayAllMs        Percentiles            `json:"delayAllMs"` // whole run, ramp included
	WindowS           float64                `json:"windowS"`
	PPS               float64                `json:"ppsReceived"` // in the steady window
	KbpsPerPeer       float64                `json:"kbpsPerReceivingPeer"`
	TargetCPU         float64                `json:"targetCpuPct"`
	TargetRSSMiB      float64                `json:"targetRssMiB"`
	TargetRSSStartMiB float64                `json:"targetRssStartMiB"` // before the first peer
	TargetThreads     int                    `json:"targetThreads"`     // most threads of the target seen
	TargetCPUusPerPkt float64                `json:"targetCpuUsPerReceivedPacket"`
	TargetSysPct      float64                `json:"targetSysCpuPct"` // the part of TargetCPU in the kernel
	TargetSysUsPerPkt float64                `json:"targetSysCpuUsPerReceivedPacket"`
	SelfCPU           float64                `json:"selfCpuPct"`
	SelfRSSMiB        float64                `json:"selfRssMiB"`
	SelfCPUusPerPkt   float64                `json:"selfCpuUsPerReceivedPacket"`
	SelfRSSPerPeerKiB float64                `json:"selfRssPerPeerKiB"` // (end − start) ÷ connected
	SelfRSSStartMiB   float64                `json:"selfRssStartMiB"`
	Errors            map[string]int         `json:"errors,omitempty"`
}

// Percentiles of a distribution.
type Percentiles struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

func percentiles(v []float64) Percentiles {
	if len(v) == 0 {
		return Percentiles{}
	}
	slices.Sort(v)
	at := func(q float64) float64 { return v[min(int(math.Ceil(q*float64(len(v))))-1, len(v)-1)] }
	return Percentiles{N: len(v), P50: at(0.5), P95: at(0.95), P99: at(0.99), Max: v[len(v)-1]}
}

// Result is everything a run produced.
type Result struct {
	Config  Config      `json:"config"`
	Start   time.Time   `json:"start"`
	Summary Summary     `json:"summary"`
	Samples []Sample    `json:"samples"`
	Peers   []PeerStats `json:"peers"`
	Error   string      `json:"error,omitempty"`
}

// sample records the state once a second and prints the progress line.
func (r *Runner) sample(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	lastPkts, lastBytes := r.tot.Packets.Load(), r.tot.Bytes.Load()
	lastT := time.Now()
	tgt0, _ := ReadProc(r.cfg.TargetPID)
	self0, _ := ReadProc(0)
	for {
		select {
		case <-ctx.Done():
			if r.cfg.Progress != nil {
				fmt.Fprintln(r.cfg.Progress)
			}
			return
		case <-tick.C:
		}
		now := time.Now()
		pk, by := r.tot.Packets.Load(), r.tot.Bytes.Load()
		el := now.Sub(lastT).Seconds()
		s := Sample{T: now.Sub(r.started).Seconds(), PPS: float64(pk-lastPkts) / el, Kbps: float64(by-lastBytes) * 8 / 1000 / el,
			Lost: r.tot.Lost.Load(), NACKsSent: r.tot.NACKsSent.Load(), NACKsRecv: r.tot.NACKsRecv.Load(), PLIsRecv: r.tot.PLIsRecv.Load(),
			DelayP50Ms: ms(r.tot.Delay.Quantile(0.5)), DelayP99Ms: ms(r.tot.Delay.Quantile(0.99))}
		lastPkts, lastBytes, lastT = pk, by, now
		for _, p := range r.allPeers() {
			s.Started++
			if p.Failed() != "" {
				s.Failed++
			} else if p.Up() {
				s.Peers++
			}
		}
		if r.cfg.TargetPID > 0 {
			if n := ProcThreads(r.cfg.TargetPID); n > r.threads {
				r.threads = n
			}
			if t1, err := ReadProc(r.cfg.TargetPID); err == nil {
				s.TargetCPU, s.TargetRSSMiB = CPUPercent(tgt0, t1), float64(t1.RSS)/(1<<20)
				s.TargetSys = SysPercent(tgt0, t1)
				tgt0 = t1
			}
		}
		if s1, err := ReadProc(0); err == nil {
			s.SelfCPU, s.SelfRSSMiB = CPUPercent(self0, s1), float64(s1.RSS)/(1<<20)
			self0 = s1
		}
		r.mu.Lock()
		s.Phase = r.phase
		r.samples = append(r.samples, s)
		r.mu.Unlock()
		if w := r.cfg.Progress; w != nil {
			tgt := ""
			if r.cfg.TargetPID > 0 {
				tgt = fmt.Sprintf(" | target %5.1f%% CPU %6.1f MiB", s.TargetCPU, s.TargetRSSMiB)
			}
			fmt.Fprintf(w, "\r%5.0fs %-6s peers %d/%d failed %d | %7.0f pkt/s %7.0f kbit/s lost %d nack %d/%d pli %d | delay p50 %.1f ms p99 %.1f ms%s | self %5.1f%% %6.1f MiB   ",
				s.T, s.Phase, s.Peers, s.Started, s.Failed, s.PPS, s.Kbps, s.Lost, s.NACKsSent, s.NACKsRecv, s.PLIsRecv, s.DelayP50Ms, s.DelayP99Ms, tgt, s.SelfCPU, s.SelfRSSMiB)
		}
	}
}

func (r *Runner) result(w0, w1 time.Time, runErr error) *Result {
	res := &Result{Config: r.cfg, Start: r.started}
	if runErr != nil {
		res.Error = runErr.Error()
	}
	r.mu.Lock()
	res.Samples = slices.Clone(r.samples)
	r.mu.Unlock()
	sm := Summary{SetupMs: map[string]Percentiles{}, Errors: map[string]int{}}
	var ice, dtls, rtp, frame, jit []float64
	for _, p := range r.allPeers() {
		ps := p.Stats()
		res.Peers = append(res.Peers, ps)
		sm.Peers++
		if ps.Error != "" {
			sm.Failed++
			e := ps.Error
			if len(e) > 120 {
				e = e[:120]
			}
			sm.Errors[e]++
		}
		if ps.DTLSMs > 0 {
			sm.Connected++
		}
		if ps.ICEMs > 0 {
			ice = append(ice, ps.ICEMs)
		}
		if ps.DTLSMs > 0 {
			dtls = append(dtls, ps.DTLSMs)
		}
		if ps.FirstRTPMs > 0 {
			rtp = append(rtp, ps.FirstRTPMs)
			sm.Receiving++
		}
		if ps.FirstFrameMs > 0 {
			frame = append(frame, ps.FirstFrameMs)
		}
		for _, st := range ps.Streams {
			sm.Packets += st.Packets
			sm.Lost += st.Lost
			sm.NACKsSent += st.NACKsSent
			if st.Packets > 0 {
				jit = append(jit, st.JitterMs)
			}
		}
		sm.NACKsRecv += ps.NACKsRecv
		sm.PLIsRecv += ps.PLIsRecv
	}
	sm.SetupMs["iceConnected"] = percentiles(ice)
	sm.SetupMs["dtlsConnected"] = percentiles(dtls)
	sm.SetupMs["firstRtp"] = percentiles(rtp)
	sm.SetupMs["firstFrame"] = percentiles(frame)
	if sm.Packets > 0 {
		sm.LossPct = 100 * float64(sm.Lost) / float64(sm.Packets+uint64(max(sm.Lost, 0)))
	}
	for _, j := range jit {
		sm.JitterMs += j / float64(len(jit))
	}
	pct := func(h *DelayHist) Percentiles {
		return Percentiles{N: int(h.Count()), P50: ms(h.Quantile(0.5)), P95: ms(h.Quantile(0.95)), P99: ms(h.Quantile(0.99)), Max: ms(h.Quantile(1))}
	}
	sm.DelayAllMs = pct(&r.tot.Delay)
	sm.DelayMs = sm.DelayAllMs
	if r.tot.SteadyDelay.Count() > 0 {
		sm.DelayMs = pct(&r.tot.SteadyDelay)
	}
	// Steady window figures come from the samples inside it.
	var n int
	var selfMax float64
	for _, s := range res.Samples {
		at := r.started.Add(time.Duration(s.T * float64(time.Second)))
		if at.Before(w0.Add(time.Second)) || at.After(w1.Add(500*time.Millisecond)) {
			continue
		}
		n++
		sm.PPS += s.PPS
		sm.KbpsPerPeer += s.Kbps
		sm.TargetCPU += s.TargetCPU
		sm.TargetSysPct += s.TargetSys
		sm.SelfCPU += s.SelfCPU
		sm.TargetRSSMiB = max(sm.TargetRSSMiB, s.TargetRSSMiB)
		selfMax = max(selfMax, s.SelfRSSMiB)
	}
	if n > 0 {
		sm.WindowS = float64(n)
		sm.PPS /= float64(n)
		sm.TargetCPU /= float64(n)
		sm.TargetSysPct /= float64(n)
		sm.SelfCPU /= float64(n)
		sm.KbpsPerPeer /= float64(n)
		if sm.Receiving > 0 {
			sm.KbpsPerPeer /= float64(sm.Receiving)
		}
		if sm.PPS > 0 {
			sm.SelfCPUusPerPkt = sm.SelfCPU / 100 * 1e6 / sm.PPS
			sm.TargetCPUusPerPkt = sm.TargetCPU / 100 * 1e6 / sm.PPS
			sm.TargetSysUsPerPkt = sm.TargetSysPct / 100 * 1e6 / sm.PPS
		}
	}
	sm.SelfRSSMiB = selfMax
	sm.TargetThreads = r.threads
	if sm.Connected > 0 {
		sm.SelfRSSPerPeerKiB = selfMax * 1024 / float64(sm.Connected)
	}
	res.Summary = sm
	return res
}

// window sets the steady-window figures from its two ends.
func (sm *Summary) window(a, b windowMark, target bool) {
	el := b.at.Sub(a.at).Seconds()
	if el <= 0 {
		return
	}
	sm.WindowS = el
	sm.PPS = float64(b.packets-a.packets) / el
	sm.KbpsPerPeer = 0
	if sm.Receiving > 0 {
		sm.KbpsPerPeer = float64(b.bytes-a.bytes) * 8 / 1000 / el / float64(sm.Receiving)
	}
	sm.SelfCPU = CPUPercent(a.self, b.self)
	sm.SelfRSSMiB = float64(b.self.RSS) / (1 << 20)
	if sm.Connected > 0 {
		sm.SelfRSSPerPeerKiB = sm.SelfRSSMiB * 1024 / float64(sm.Connected)
	}
	if target && b.target.RSS > 0 {
		sm.TargetCPU = CPUPercent(a.target, b.target)
		sm.TargetSysPct = SysPercent(a.target, b.target)
		sm.TargetRSSMiB = float64(b.target.RSS) / (1 << 20)
	}
	if sm.PPS > 0 {
		sm.SelfCPUusPerPkt = sm.SelfCPU / 100 * 1e6 / sm.PPS
		sm.TargetCPUusPerPkt = sm.TargetCPU / 100 * 1e6 / sm.PPS
		sm.TargetSysUsPerPkt = sm.TargetSysPct / 100 * 1e6 / sm.PPS
	}
}
