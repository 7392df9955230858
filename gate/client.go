// Package gate decides who comes through the HTTP front door: the client's
// address behind trusted proxies, per-address join and connection limits,
// request deadlines, the loopback-only rule, and refusal logs that a flood
// cannot turn into a flood of lines.
package gate

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// maxHops bounds the forwarding entries walked for one request.
const maxHops = 32

// Proxies are the reverse proxies whose forwarding headers are believed.
type Proxies []netip.Prefix

// ParseProxies reads CIDRs ("10.0.0.0/8") and single addresses.
func ParseProxies(list []string) (Proxies, error) {
	var p Proxies
	for _, s := range list {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if strings.Contains(s, "/") {
			pr, err := netip.ParsePrefix(s)
			if err != nil {
				return nil, fmt.Errorf("trusted proxy %q: %w", s, err)
			}
			if pr.Addr().Is4In6() {
				pr = netip.PrefixFrom(pr.Addr().Unmap(), pr.Bits()-96)
			}
			p = append(p, pr.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("trusted proxy %q: %w", s, err)
		}
		a = a.Unmap()
		p = append(p, netip.PrefixFrom(a, a.BitLen()))
	}
	return p, nil
}

// Trusts reports whether a is one of the proxies.
func (p Proxies) Trusts(a netip.Addr) bool {
	a = a.Unmap()
	for _, pr := range p {
		if pr.Contains(a) {
			return true
		}
	}
	return false
}

// Addr is the address in r.RemoteAddr: after Handler, the client's.
func Addr(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// Client is the address of the client that sent r: the TCP peer, or, when
// the peer is a trusted proxy, the nearest forwarded address that is not
// itself a trusted proxy. X-Forwarded-For is read when present (every common
// proxy appends to it), Forwarded otherwise; an entry that is not an address
// ends the walk at the proxy that wrote it.
func (p Proxies) Client(r *http.Request) netip.Addr {
	cur := Addr(r)
	if len(p) == 0 || !cur.IsValid() || !p.Trusts(cur) {
		return cur
	}
	hops := forwardedFor(r.Header)
	for i := len(hops) - 1; i >= 0 && i >= len(hops)-maxHops && p.Trusts(cur); i-- {
		a, ok := parseHop(hops[i])
		if !ok {
			break
		}
		cur = a
	}
	return cur
}

// Handler sets r.RemoteAddr to the client's address (with port 0 when it was
// forwarded), so that every handler's limits and logs see the client, not the
// proxy.
func (p Proxies) Handler(h http.Handler) http.Handler {
	if len(p) == 0 {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c := p.Client(r); c.IsValid() && c != Addr(r) {
			r2 := *r
			r2.RemoteAddr = netip.AddrPortFrom(c, 0).String()
			r = &r2
		}
		h.ServeHTTP(w, r)
	})
}

// forwardedFor lists the hops of X-Forwarded-For, or else the for= values of
// Forwarded (RFC 7239), nearest last.
func forwardedFor(h http.Header) []string {
	var out []string
	if xff := h.Values("X-Forwarded-For"); len(xff) > 0 {
		for _, v := range xff {
			for _, hop := range strings.Split(v, ",") {
				out = append(out, strings.TrimSpace(hop))
			}
		}
		return out
	}
	for _, v := range h.Values("Forwarded") {
		for _, elem := range strings.Split(v, ",") {
			for _, pair := range strings.Split(elem, ";") {
				k, val, ok := strings.Cut(strings.TrimSpace(pair), "=")
				if ok && strings.EqualFold(strings.TrimSpace(k), "for") {
					out = append(out, strings.TrimSpace(val))
				}
			}
		}
	}
	return out
}

// parseHop reads 192.0.2.1, 192.0.2.1:80, [2001:db8::1] or "[2001:db8::1]:80".
func parseHop(s string) (netip.Addr, bool) {
	s = strings.Trim(s, `"`)
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), true
	}
	if a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")); err == nil {
		return a.Unmap(), true
	}
	return netip.Addr{}, false
}

// Local decides whether r may use a loopback-only endpoint (nil: it may). It
// must come from loopback, name this machine in Host (a DNS-rebinding page
// names its own domain) and carry no forwarding header (a reverse proxy on
// this host forwards remote clients). hosts are further names of this
// machine, such as the node URL's host.
func Local(r *http.Request, hosts ...string) error {
	for _, h := range []string{"Forwarded", "X-Forwarded-For", "X-Real-Ip"} {
		if _, ok := r.Header[h]; ok {
			return fmt.Errorf("the request came through a proxy (%s)", h)
		}
	}
	if a := Addr(r); !a.IsValid() || !a.IsLoopback() {
		return fmt.Errorf("the client is not on loopback")
	}
	if !localHost(r.Host, hosts) {
		return fmt.Errorf("the Host header does not name this machine")
	}
	return nil
}

func localHost(host string, extra []string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if host == "localhost" {
		return true
	}
	if a, err := netip.ParseAddr(host); err == nil && a.Unmap().IsLoopback() {
		return true
	}
	for _, e := range extra {
		if e != "" && strings.EqualFold(host, e) {
			return true
		}
	}
	return false
}
