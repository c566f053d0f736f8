package access

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestBearerToken(t *testing.T) {
	for in, want := range map[string]string{"Bearer abc": "abc", "bearer  abc ": "abc", "Basic abc": "", "Bearer": "", "Bearer ": "", "": ""} {
		got, ok := BearerToken(in)
		if got != want || ok != (want != "") {
			t.Errorf("BearerToken(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}

func TestListenCheck(t *testing.T) {
	for addr, loopback := range map[string]bool{"127.0.0.1:80": true, "[::1]:80": true, "localhost:80": true, "127.0.0.2:1": true,
		"0.0.0.0:80": false, ":80": false, "10.0.0.1:80": false, "[::]:80": false, "example.com:80": false} {
		err := ListenCheck(None, "M", "X", addr)
		if (err == nil) != loopback {
			t.Errorf("ListenCheck(none, %s) = %v, loopback %v", addr, err, loopback)
		}
		if err := ListenCheck(Token, "M", "X", addr); err != nil {
			t.Errorf("token mode may listen anywhere: %v", err)
		}
	}
	if err := ListenCheck(None, "M", "X", "nonsense"); err == nil {
		t.Error("an address without a port passed")
	}
}

func TestServerConfigNamesWhatIsMissing(t *testing.T) {
	for _, c := range []struct {
		mode Mode
		f    TLSFiles
		says string
	}{
		{MTLS, TLSFiles{Prefix: "JANGAR_WATCH", CertFile: "c", KeyFile: "k"}, "JANGAR_WATCH_TLS_CLIENT_CA_FILE"},
		{Token, TLSFiles{Prefix: "JANGAR_WATCH", CertFile: "c"}, "both"},
		{Token, TLSFiles{Prefix: "JANGAR_WATCH", ClientCAFile: "ca"}, "needs JANGAR_WATCH_TLS_CERT_FILE"},
		{Token, TLSFiles{Prefix: "JANGAR_WATCH", CertFile: "c", KeyFile: "k", ClientCAFile: "ca"}, "only used with JANGAR_WATCH_AUTH_MODE=mtls"},
		{Token, TLSFiles{Prefix: "JANGAR_WATCH", CertFile: "/nonexistent/c", KeyFile: "/nonexistent/k"}, "load the TLS certificate"},
	} {
		if _, err := ServerConfig(c.mode, c.f); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s %+v: %v, want it to say %q", c.mode, c.f, err, c.says)
		}
	}
	if cfg, err := ServerConfig(Token, TLSFiles{Prefix: "JANGAR_WATCH"}); cfg != nil || err != nil {
		t.Errorf("token without files: %v %v, want plaintext", cfg, err)
	}
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]Mode{"": None, "none": None, "Token": Token, "mtls": MTLS} {
		if got, err := ParseMode("M", in); got != want || err != nil {
			t.Errorf("ParseMode(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseMode("M", "open"); err == nil {
		t.Error("ParseMode(open) passed")
	}
}

// testJWT is a token shaped as a ServiceAccount token (a JWT with an expiry in an hour and the
// audiences given) with a signature no one checks: the fake API server below decides.
func testJWT(sub string, aud ...string) string {
	enc := func(v any) string { b, _ := json.Marshal(v); return base64.RawURLEncoding.EncodeToString(b) }
	claims := map[string]any{"sub": sub, "exp": time.Now().Add(time.Hour).Unix()}
	if len(aud) > 0 {
		claims["aud"] = aud
	}
	return enc(map[string]string{"alg": "RS256"}) + "." + enc(claims) + ".c2ln"
}

var goodToken = testJWT("good")

// fakeReviews answers TokenReviews (only goodToken is authenticated) and access reviews (always
// allowed), counting the TokenReviews: a pure unit test of the cache, the real API server is in
// the integration tests here and in the gateway's.
func fakeReviews(t *testing.T) (*fake.Clientset, *int) {
	t.Helper()
	kc := fake.NewClientset()
	n := 0
	kc.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		n++
		tr := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview)
		if tr.Spec.Token == goodToken {
			tr.Status = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: "alice"}}
		}
		return true, tr, nil
	})
	kc.PrependReactor("create", "localsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authzv1.LocalSubjectAccessReview)
		sar.Status.Allowed = true
		return true, sar, nil
	})
	return kc, &n
}

func TestBadTokensCannotEvictGrants(t *testing.T) {
	kc, reviews := fakeReviews(t)
	r := NewReviewer(kc, ReviewerOptions{Authorize: SubjectAccess(kc, "agents", ResourceAttributes{Resource: "r"}, nil), ReviewsPerSecond: 1e6})
	ctx := t.Context()
	if user, err := r.Check(ctx, goodToken, "watch"); err != nil || user != "alice" {
		t.Fatalf("good token: %q %v", user, err)
	}
	for i := range 2 * maxAllowed { // more than either cache holds, each a plausible token
		if _, err := r.Check(ctx, testJWT(fmt.Sprintf("bad-%d", i)), "watch"); KindOf(err) != Unauthenticated {
			t.Fatalf("bad token: %v", err)
		}
	}
	before := *reviews
	if _, err := r.Check(ctx, goodToken, "watch"); err != nil {
		t.Fatal(err)
	}
	if *reviews != before {
		t.Fatal("the good token was reviewed again: bad tokens evicted its grant")
	}
	if _, err := r.Check(ctx, testJWT("bad-0"), "watch"); KindOf(err) != Unauthenticated {
		t.Fatalf("a refused token passed: %v", err)
	}
}

func TestAFailedReviewSaysOnlyThatToTheCaller(t *testing.T) {
	kc := fake.NewClientset()
	kc.PrependReactor("create", "tokenreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, fmt.Errorf(`tokenreviews.authentication.k8s.io is forbidden: User "system:serviceaccount:agents:watch-gateway" cannot create resource`)
	})
	reviews := 0
	r := NewReviewer(kc, ReviewerOptions{OnReview: func(string) { reviews++ }})
	for range 2 {
		_, err := r.Check(t.Context(), testJWT("some-token"), "watch")
		if KindOf(err) != Unavailable || strings.Contains(err.Error(), "serviceaccount") || !strings.Contains(err.Error(), "retry") {
			t.Fatalf("%v: want Unavailable, saying retry and nothing of the API server's answer", err)
		}
	}
	if reviews != 2 {
		t.Fatalf("%d reviews for two checks: a failed review must not be cached", reviews)
	}
}

// A string that is not a ServiceAccount token for the server's audiences (junk, a JWT for
// another audience, an expired one) is refused without a TokenReview, saying what to send.
func TestImplausibleTokensCostNoReview(t *testing.T) {
	kc, reviews := fakeReviews(t)
	kinds := map[string]int{}
	r := NewReviewer(kc, ReviewerOptions{Audiences: []string{"agentplane"}, OnReview: func(k string) { kinds[k]++ }})
	expired := func() string {
		enc := func(v any) string { b, _ := json.Marshal(v); return base64.RawURLEncoding.EncodeToString(b) }
		return enc(map[string]string{"alg": "RS256"}) + "." + enc(map[string]any{"exp": time.Now().Add(-time.Hour).Unix(), "aud": "agentplane"}) + ".c2ln"
	}()
	tokens := []string{"junk", "a.b.c", "Zm9v.YmFy.YmF6", testJWT("x"), testJWT("x", "https://kubernetes.default.svc"), expired}
	for i := range 2000 {
		tokens = append(tokens, fmt.Sprintf("junk-%d-%s", i, strings.Repeat("x", i%50)))
	}
	for _, tok := range tokens {
		_, err := r.Check(t.Context(), tok, "watch")
		if KindOf(err) != Unauthenticated || !strings.Contains(err.Error(), "refused without review") && !strings.Contains(err.Error(), "expired") {
			t.Fatalf("%q: %v", tok, err)
		}
		if _, err := r.Authenticate(t.Context(), tok); KindOf(err) != Unauthenticated {
			t.Fatalf("Authenticate(%q): %v", tok, err)
		}
	}
	if *reviews != 0 || kinds["refused-locally"] != 2*len(tokens) {
		t.Errorf("%d TokenReviews for %d implausible tokens (kinds %v), want none", *reviews, len(tokens), kinds)
	}
	if _, err := r.Check(t.Context(), testJWT("y", "agentplane"), "watch"); KindOf(err) != Unauthenticated || *reviews != 1 {
		t.Errorf("a plausible token for the audience was not reviewed: %v (%d reviews)", err, *reviews)
	}
}

// New tokens are reviewed at a bounded rate: a flood of distinct plausible tokens costs the API
// server at most the burst plus the rate, the rest are told to retry.
func TestNewTokensAreReviewedAtABoundedRate(t *testing.T) {
	kc, reviews := fakeReviews(t)
	throttled := 0
	r := NewReviewer(kc, ReviewerOptions{ReviewsPerSecond: 10, OnReview: func(k string) {
		if k == "throttled" {
			throttled++
		}
	}})
	start := time.Now()
	for i := range 200 {
		_, err := r.Check(t.Context(), testJWT(fmt.Sprintf("flood-%d", i)), "watch")
		if KindOf(err) == Unavailable && !strings.Contains(err.Error(), "too many new tokens") {
			t.Fatalf("throttled without saying so: %v", err)
		}
	}
	allowed := 20 + 10*time.Since(start).Seconds() + 1
	if float64(*reviews) > allowed || throttled == 0 || *reviews+throttled != 200 {
		t.Errorf("%d reviews and %d throttled for 200 new tokens in %s, want at most %.0f reviews", *reviews, throttled, time.Since(start), allowed)
	}
}

// A caller already known to be good renews its expired grant whatever a flood of new tokens has
// done to the review bound; the flood's own tokens stay throttled.
func TestKnownTokensAreRenewedWhateverTheFlood(t *testing.T) {
	kc, reviews := fakeReviews(t)
	clk := clocktesting.NewFakePassiveClock(time.Now())
	r := NewReviewer(kc, ReviewerOptions{ReviewsPerSecond: 1, AllowTTL: 30 * time.Second, Clock: clk})
	ctx := t.Context()
	if _, err := r.Check(ctx, goodToken, "watch"); err != nil {
		t.Fatal(err)
	}
	throttled := 0
	for i := range 50 { // the bound (burst 2) is spent at once
		if _, err := r.Check(ctx, testJWT(fmt.Sprintf("flood-%d", i)), "watch"); KindOf(err) == Unavailable {
			throttled++
		}
	}
	if throttled < 45 {
		t.Fatalf("only %d of 50 new tokens were throttled", throttled)
	}
	clk.SetTime(clk.Now().Add(31 * time.Second)) // the good token's grant has expired
	before := *reviews
	if user, err := r.Check(ctx, goodToken, "watch"); err != nil || user != "alice" {
		t.Fatalf("the known token after the flood: %q %v, want it renewed", user, err)
	}
	if *reviews != before+1 {
		t.Errorf("the renewal sent %d reviews, want 1", *reviews-before)
	}
	if _, err := r.Check(ctx, testJWT("flood-new"), "watch"); KindOf(err) != Unavailable {
		t.Errorf("a new token during the flood: %v, want throttled", err)
	}
}
