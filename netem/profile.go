package netem

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Spec is the impairment of both directions: AB is what packets from host A
// to host B suffer, BA the way back.
type Spec struct {
	AB, BA Params
}

func (s Spec) String() string {
	if s.AB == s.BA && s.AB.GE == nil {
		return s.AB.String()
	}
	return "a->b: " + s.AB.String() + "; b->a: " + s.BA.String()
}

// Profile is a named Spec.
type Profile struct {
	Name string
	Spec Spec
	Note string
}

func symmetric(p Params) Spec { return Spec{AB: p, BA: p} }

var profiles = map[string]Profile{}

func addProfile(p Profile) { profiles[p.Name] = p }

func init() {
	addProfile(Profile{Name: "none", Note: "no impairment: the TUN path alone"})
	addProfile(Profile{Name: "lan", Spec: symmetric(Params{Delay: 250 * time.Microsecond, Rate: 1_000_000_000, Limit: 1000}),
		Note: "gigabit LAN: 1 Gbit/s each way, 0.25 ms each way, 1000-packet queue"})
	addProfile(Profile{Name: "long", Spec: symmetric(Params{Delay: 40 * time.Millisecond}),
		Note: "long RTT: 40 ms each way (80 ms RTT), no rate limit"})
	addProfile(Profile{Name: "mobile", Spec: Spec{
		AB: Params{Delay: 40 * time.Millisecond, Jitter: 15 * time.Millisecond},
		BA: Params{Delay: 40 * time.Millisecond},
	}, Note: "reordering mobile-like link: a->b 40 ms ± 15 ms normal (reorders), b->a 40 ms"})

	// The same paths with a bottleneck, as links in the field have: the
	// study's TCP reached about 90 Mbit/s on its long path.
	addProfile(Profile{Name: "long-100mbit", Spec: symmetric(Params{Delay: 40 * time.Millisecond, Rate: 100_000_000}),
		Note: "long RTT behind a 100 Mbit/s bottleneck: 40 ms each way, 1000-packet queue"})
	addProfile(Profile{Name: "mobile-20mbit", Spec: Spec{
		AB: Params{Delay: 40 * time.Millisecond, Jitter: 15 * time.Millisecond, Rate: 20_000_000},
		BA: Params{Delay: 40 * time.Millisecond, Rate: 20_000_000},
	}, Note: "mobile behind a 20 Mbit/s bottleneck (jitter after the queue, so it still reorders)"})

	// The grids of the WebTransport study: one dimension varied at a time,
	// the others neutral. Delay is applied each way.
	for _, r := range []string{"0.1", "0.5", "1", "2", "5", "10", "20", "50", "100"} {
		rate, _ := ParseRate(r + "mbit")
		addProfile(Profile{Name: "wt-bw-" + r + "mbit", Spec: symmetric(Params{Rate: rate}),
			Note: "WebTransport study bandwidth grid: " + r + " Mbit/s each way"})
	}
	for _, d := range []int{0, 10, 25, 50, 100, 150, 200, 250} {
		addProfile(Profile{Name: "wt-delay-" + strconv.Itoa(d) + "ms", Spec: symmetric(Params{Delay: time.Duration(d) * time.Millisecond}),
			Note: fmt.Sprintf("WebTransport study delay grid: %d ms each way", d)})
	}
	for _, l := range []string{"0", "0.1", "0.5", "1", "2", "5", "10", "20"} {
		x, _ := strconv.ParseFloat(l, 64)
		addProfile(Profile{Name: "wt-loss-" + l + "pct", Spec: symmetric(Params{Loss: x / 100}),
			Note: "WebTransport study loss grid: " + l + "% random loss each way"})
	}
}

// LookupProfile finds a named profile.
func LookupProfile(name string) (Profile, error) {
	p, ok := profiles[name]
	if !ok {
		return Profile{}, fmt.Errorf("unknown netem profile %q (try: %s)", name, strings.Join(ProfileNames()[:6], ", ")+", …")
	}
	return p, nil
}

// ProfileNames lists the profiles: the three named ones first, then the grids.
func ProfileNames() []string {
	first := []string{"none", "lan", "long", "mobile", "long-100mbit", "mobile-20mbit"}
	var rest []string
	for n := range profiles {
		if !strings.HasPrefix(n, "wt-") {
			continue
		}
		rest = append(rest, n)
	}
	sort.Slice(rest, func(i, j int) bool { return gridKey(rest[i]) < gridKey(rest[j]) })
	return append(first, rest...)
}

func gridKey(n string) string {
	// Sort the grids numerically within each dimension.
	parts := strings.SplitN(n, "-", 3)
	if len(parts) < 3 {
		return n
	}
	num := strings.TrimRight(parts[2], "mbitspc")
	x, _ := strconv.ParseFloat(num, 64)
	return fmt.Sprintf("%s-%012.3f", parts[1], x)
}

// Step is one line of a script: at time At, set the direction(s) to Params.
type Step struct {
	At     time.Duration
	AB, BA bool
	Params Params
}

// Script changes the impairment over time.
type Script []Step

// ParseScript reads one step per line:
//
//	at 5s rate 1mbit delay 100ms
//	at 10s a->b loss 5%
//	at 15s b->a none
//
// Each step replaces the parameters of the named direction (both when none
// is named), like `tc qdisc change`. Blank lines and # comments are skipped.
func ParseScript(text string) (Script, error) {
	var s Script
	for ln, line := range strings.Split(text, "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 2 || f[0] != "at" {
			return nil, fmt.Errorf("script line %d: want \"at <time> [a->b|b->a] <params>\"", ln+1)
		}
		at, err := time.ParseDuration(f[1])
		if err != nil || at < 0 {
			return nil, fmt.Errorf("script line %d: bad time %q", ln+1, f[1])
		}
		st := Step{At: at, AB: true, BA: true}
		rest := f[2:]
		if len(rest) > 0 {
			switch rest[0] {
			case "a->b", "ab":
				st.BA, rest = false, rest[1:]
			case "b->a", "ba":
				st.AB, rest = false, rest[1:]
			case "both":
				rest = rest[1:]
			}
		}
		st.Params, err = parseFields(rest)
		if err != nil {
			return nil, fmt.Errorf("script line %d: %w", ln+1, err)
		}
		s = append(s, st)
	}
	sort.SliceStable(s, func(i, j int) bool { return s[i].At < s[j].At })
	return s, nil
}
