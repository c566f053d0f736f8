package wiring

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A request naming a host the gateway does not serve is refused (DNS rebinding: a page on
// evil.example whose name resolves to the gateway's address sends Host: evil.example); IP
// addresses, the listed names and subdomains of a wildcard entry are served.
func TestHostAllowListRefusesOtherNames(t *testing.T) {
	served := 0
	h := newHostAllowList([]string{"localhost", "watch-gateway.agents.svc", "*.console.example.com"},
		http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served++ }))
	for host, ok := range map[string]bool{
		"localhost:18101": true, "LOCALHOST": true, "127.0.0.1:8080": true, "[::1]:8080": true, "10.96.3.4": true,
		"watch-gateway.agents.svc:8080": true, "a.console.example.com": true, "console.example.com": false,
		"evil.example:18101": false, "localhost.evil.example": false, "watch-gateway.agents.svc.evil.example": false, "": false,
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Host = host
		w := httptest.NewRecorder()
		before := served
		h.ServeHTTP(w, r)
		switch {
		case ok && (served != before+1 || w.Code != http.StatusOK):
			t.Errorf("host %q refused: %d %s", host, w.Code, w.Body)
		case !ok && (served != before || w.Code != http.StatusMisdirectedRequest || !strings.Contains(w.Body.String(), "http.allowedHosts")):
			t.Errorf("host %q served (or refused without saying how to allow it): %d %s", host, w.Code, w.Body)
		}
	}
}
