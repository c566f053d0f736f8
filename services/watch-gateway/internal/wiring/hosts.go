package wiring

import (
	"fmt"
	"net"
	"net/http"
	"strings"
)

// hostAllowList refuses a request whose Host header names a host the gateway does not serve:
// a web page on another site cannot then reach it through DNS rebinding (a name of the
// attacker's that resolves to the gateway's address sends that name as Host). An IP address is
// always allowed (rebinding needs a name); a name must be one of allowed, exactly or, for an
// entry "*.example.com", as a subdomain of it (case-insensitive, port ignored).
type hostAllowList struct {
	names  []string
	next   http.Handler
	listed string // for the refusal
}

func newHostAllowList(allowed []string, next http.Handler) *hostAllowList {
	h := &hostAllowList{next: next}
	for _, a := range allowed {
		if a = strings.ToLower(strings.TrimSpace(a)); a != "" {
			h.names = append(h.names, a)
		}
	}
	h.listed = strings.Join(h.names, ", ")
	return h
}

// allows reports whether host (a Host header, maybe with a port) is served.
func (h *hostAllowList) allows(host string) bool {
	name := host
	if n, _, err := net.SplitHostPort(host); err == nil {
		name = n
	}
	name = strings.ToLower(strings.TrimSuffix(strings.Trim(name, "[]"), "."))
	if name == "" {
		return false
	}
	if net.ParseIP(name) != nil {
		return true
	}
	for _, a := range h.names {
		if suffix, ok := strings.CutPrefix(a, "*."); ok {
			if strings.HasSuffix(name, "."+suffix) {
				return true
			}
		} else if name == a {
			return true
		}
	}
	return false
}

func (h *hostAllowList) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.allows(r.Host) {
		http.Error(w, fmt.Sprintf("host %q is not one this gateway serves (%s, and any IP address): add it to the chart's http.allowedHosts (JANGAR_HTTP_ALLOWED_HOSTS)",
			r.Host, h.listed), http.StatusMisdirectedRequest)
		return
	}
	h.next.ServeHTTP(w, r)
}
