package gateway

import (
	"net/http/httptest"
	"testing"
)

// An aggregated stream arrives from the API server; its per-address bound must count the user's
// address, not the API server's, or 200 users' streams would exhaust it.
func TestAnAggregatedStreamCountsTheUsersAddress(t *testing.T) {
	r := httptest.NewRequest("GET", "/apis/x?watch=true&resourceVersion=c1", nil)
	r.RemoteAddr = "10.0.0.1:443" // the API server
	r.Header.Add("X-Forwarded-For", "1.2.3.4, 192.0.2.7")
	out := asStream(r)
	if out.RemoteAddr != "192.0.2.7" {
		t.Errorf("RemoteAddr = %q, want the address the API server appended (192.0.2.7)", out.RemoteAddr)
	}
	if q := out.URL.Query(); q.Get("since") != "c1" || q.Get("format") != "ndjson" || q.Has("watch") {
		t.Errorf("query = %v, want since=c1 format=ndjson", q)
	}
	r.Header.Del("X-Forwarded-For")
	if out := asStream(r); out.RemoteAddr != "" {
		t.Errorf("without X-Forwarded-For: RemoteAddr = %q, want none (not counted)", out.RemoteAddr)
	}
}
