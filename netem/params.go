// Package netem is Petrel's userspace network emulator. The kernel on the
// machines Petrel is measured on has no netem qdisc, so this package routes IP
// packets between two network namespaces through TUN devices and applies, per
// direction, what netem would: delay with jitter (which reorders packets),
// random and Gilbert–Elliott loss, duplication and a rate limit with a bounded
// queue, changed over time by a script.
package netem

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Distribution shapes the jitter added to the base delay.
type Distribution int

const (
	// Normal: mean Delay, standard deviation Jitter (netem's default table).
	Normal Distribution = iota
	// Uniform: anywhere in [Delay-Jitter, Delay+Jitter], as netem without a table.
	Uniform
	// Pareto: mean Delay, standard deviation Jitter, heavy right tail (shape 3).
	Pareto
)

func (d Distribution) String() string {
	switch d {
	case Uniform:
		return "uniform"
	case Pareto:
		return "pareto"
	default:
		return "normal"
	}
}

// ParseDistribution accepts the names netem uses.
func ParseDistribution(s string) (Distribution, error) {
	switch s {
	case "normal":
		return Normal, nil
	case "uniform":
		return Uniform, nil
	case "pareto":
		return Pareto, nil
	}
	return 0, fmt.Errorf("unknown distribution %q (normal, uniform, pareto)", s)
}

// GilbertElliott is netem's "loss gemodel": a two-state Markov chain. In the
// good state packets are lost with LossGood (netem's 1-k), in the bad state
// with LossBad (netem's 1-h).
type GilbertElliott struct {
	P        float64 // probability of good -> bad per packet
	R        float64 // probability of bad -> good per packet
	LossBad  float64
	LossGood float64
}

// Params is the impairment of one direction. The zero value forwards packets
// unchanged and as fast as the host can.
type Params struct {
	Delay     time.Duration
	Jitter    time.Duration
	Dist      Distribution
	Loss      float64         // independent loss probability, 0..1
	GE        *GilbertElliott // bursty loss; replaces Loss when set
	Duplicate float64         // probability of sending a packet twice
	Rate      int64           // bits per second at the IP level; 0 = unlimited
	// Limit bounds the rate queue in packets (tail drop). 0 means
	// DefaultLimit. The delay line is not limited by it (unlike netem,
	// where a too small limit silently caps long-delay throughput).
	Limit int
}

// DefaultLimit is netem's default queue length.
const DefaultLimit = 1000

func (p Params) limit() int {
	if p.Limit > 0 {
		return p.Limit
	}
	return DefaultLimit
}

// String renders p in the syntax ParseParams reads.
func (p Params) String() string {
	var b []string
	if p.Delay > 0 || p.Jitter > 0 {
		s := "delay " + fmtDur(p.Delay)
		if p.Jitter > 0 {
			s += " " + fmtDur(p.Jitter)
			if p.Dist != Normal {
				s += " distribution " + p.Dist.String()
			}
		}
		b = append(b, s)
	}
	if p.GE != nil {
		b = append(b, fmt.Sprintf("loss gemodel %s %s %s %s", pct(p.GE.P), pct(p.GE.R), pct(1-p.GE.LossBad), pct(1-p.GE.LossGood)))
	} else if p.Loss > 0 {
		b = append(b, "loss "+pct(p.Loss))
	}
	if p.Duplicate > 0 {
		b = append(b, "duplicate "+pct(p.Duplicate))
	}
	if p.Rate > 0 {
		b = append(b, "rate "+fmtRate(p.Rate))
	}
	if p.Limit > 0 {
		b = append(b, "limit "+strconv.Itoa(p.Limit))
	}
	if len(b) == 0 {
		return "none"
	}
	return strings.Join(b, " ")
}

func fmtDur(d time.Duration) string {
	if d%time.Millisecond == 0 {
		return strconv.FormatInt(int64(d/time.Millisecond), 10) + "ms"
	}
	return d.String()
}

func pct(f float64) string { return strconv.FormatFloat(f*100, 'g', -1, 64) + "%" }

func fmtRate(bps int64) string {
	switch {
	case bps%1_000_000_000 == 0:
		return strconv.FormatInt(bps/1_000_000_000, 10) + "gbit"
	case bps%1_000_000 == 0:
		return strconv.FormatInt(bps/1_000_000, 10) + "mbit"
	case bps%1000 == 0:
		return strconv.FormatInt(bps/1000, 10) + "kbit"
	}
	return strconv.FormatInt(bps, 10) + "bit"
}

// ParseParams reads netem's tc syntax, e.g.
//
//	delay 40ms 15ms distribution normal loss 1% duplicate 0.1% rate 10mbit limit 500
//	loss gemodel 1% 30% 70% 0.1%
//
// "none" or an empty string is no impairment.
func ParseParams(s string) (Params, error) {
	return parseFields(strings.Fields(s))
}

func parseFields(f []string) (Params, error) {
	var p Params
	i := 0
	next := func() (string, bool) {
		if i >= len(f) {
			return "", false
		}
		i++
		return f[i-1], true
	}
	peek := func() string {
		if i >= len(f) {
			return ""
		}
		return f[i]
	}
	for i < len(f) {
		key, _ := next()
		switch key {
		case "none":
		case "delay":
			v, ok := next()
			if !ok {
				return p, fmt.Errorf("delay needs a value")
			}
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return p, fmt.Errorf("delay %q: want a duration like 40ms", v)
			}
			p.Delay = d
			if j, err := time.ParseDuration(peek()); err == nil {
				i++
				if j < 0 {
					return p, fmt.Errorf("negative jitter %v", j)
				}
				p.Jitter = j
			}
		case "jitter":
			v, _ := next()
			j, err := time.ParseDuration(v)
			if err != nil || j < 0 {
				return p, fmt.Errorf("jitter %q: want a duration", v)
			}
			p.Jitter = j
		case "distribution":
			v, _ := next()
			d, err := ParseDistribution(v)
			if err != nil {
				return p, err
			}
			p.Dist = d
		case "loss":
			v, _ := next()
			if v == "random" {
				v, _ = next()
			}
			if v == "gemodel" {
				var vals []float64
				for len(vals) < 4 {
					x, err := parsePct(peek())
					if err != nil {
						break
					}
					i++
					vals = append(vals, x)
				}
				if len(vals) == 0 {
					return p, fmt.Errorf("loss gemodel needs p [r [1-h [1-k]]]")
				}
				ge := &GilbertElliott{P: vals[0], R: 1 - vals[0], LossBad: 1}
				if len(vals) > 1 {
					ge.R = vals[1]
				}
				if len(vals) > 2 {
					ge.LossBad = 1 - vals[2]
				}
				if len(vals) > 3 {
					ge.LossGood = 1 - vals[3]
				}
				p.GE = ge
				continue
			}
			x, err := parsePct(v)
			if err != nil {
				return p, fmt.Errorf("loss: %w", err)
			}
			p.Loss = x
		case "duplicate":
			v, _ := next()
			x, err := parsePct(v)
			if err != nil {
				return p, fmt.Errorf("duplicate: %w", err)
			}
			p.Duplicate = x
		case "rate":
			v, _ := next()
			r, err := ParseRate(v)
			if err != nil {
				return p, err
			}
			p.Rate = r
		case "limit":
			v, _ := next()
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return p, fmt.Errorf("limit %q: want a positive packet count", v)
			}
			p.Limit = n
		default:
			return p, fmt.Errorf("unknown netem parameter %q", key)
		}
	}
	return p, nil
}

func parsePct(s string) (float64, error) {
	t := strings.TrimSuffix(s, "%")
	x, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(x) {
		return 0, fmt.Errorf("%q is not a percentage", s)
	}
	if t != s {
		x /= 100
	}
	if x < 0 || x > 1 {
		return 0, fmt.Errorf("%q is outside 0..100%%", s)
	}
	return x, nil
}

// ParseRate reads tc rate units: bit, kbit, mbit, gbit (SI, as tc) and bps
// variants meaning bytes per second.
func ParseRate(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   float64
	}{
		{"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}, {"bit", 1},
		{"gbps", 8e9}, {"mbps", 8e6}, {"kbps", 8e3}, {"bps", 8},
	}
	ls := strings.ToLower(s)
	for _, u := range units {
		if strings.HasSuffix(ls, u.suffix) {
			x, err := strconv.ParseFloat(strings.TrimSuffix(ls, u.suffix), 64)
			if err != nil || x <= 0 {
				break
			}
			return int64(math.Round(x * u.mult)), nil
		}
	}
	return 0, fmt.Errorf("rate %q: want e.g. 500kbit, 10mbit, 1gbit", s)
}
