package access

import (
	"encoding/base64"
	"encoding/json"
	"slices"
	"strings"
	"time"
)

// plausibleToken is the local check a bearer token passes before any TokenReview is sent: the
// callers of agentplane's servers present Kubernetes ServiceAccount tokens, which are JWTs
// (three base64url parts, a header naming its algorithm, claims with an expiry). Anything else
// (a junk string, a truncated token) is refused here, at no cost to the API server; so is a JWT
// already expired, or, when the server names audiences, issued for none of them. The signature
// is not checked here: the TokenReview does that. now is the wall clock (a token's expiry is
// real time, whatever clock the cache runs on).
func plausibleToken(token string, audiences []string, now time.Time) error {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return notAServiceAccountToken(audiences, "it is not a JWT (three dot-separated parts)")
	}
	var header struct {
		Alg string `json:"alg"`
	}
	var claims struct {
		Exp float64         `json:"exp"`
		Aud json.RawMessage `json:"aud"`
	}
	if decodeSegment(parts[0], &header) != nil || header.Alg == "" {
		return notAServiceAccountToken(audiences, "its header is not a JWT's")
	}
	if decodeSegment(parts[1], &claims) != nil {
		return notAServiceAccountToken(audiences, "its claims do not decode")
	}
	if claims.Exp > 0 && time.Unix(int64(claims.Exp), 0).Before(now.Add(-time.Minute)) {
		return &Error{Kind: Unauthenticated, Msg: "the bearer token expired at " + time.Unix(int64(claims.Exp), 0).UTC().Format(time.RFC3339) + ": create a new one"}
	}
	if len(audiences) > 0 {
		var aud []string
		if json.Unmarshal(claims.Aud, &aud) != nil {
			var one string
			if json.Unmarshal(claims.Aud, &one) == nil {
				aud = []string{one}
			}
		}
		if !slices.ContainsFunc(aud, func(a string) bool { return slices.Contains(audiences, a) }) {
			return notAServiceAccountToken(audiences, "it was issued for audience(s) "+strings.Join(aud, ", "))
		}
	}
	return nil
}

func decodeSegment(s string, into any) error {
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
	if err != nil {
		return err
	}
	return json.Unmarshal(b, into)
}

func notAServiceAccountToken(audiences []string, why string) error {
	want := "a Kubernetes ServiceAccount token (kubectl create token <serviceaccount>"
	if len(audiences) > 0 {
		want += " --audience " + audiences[0]
	}
	return &Error{Kind: Unauthenticated, Msg: "the bearer token is refused without review: " + why + "; send " + want + ")"}
}

// TokenExpiry is when a JWT bearer token says it expires (its exp claim), read without checking
// its signature; zero when it says nothing. A session made from the token ends no later.
func TokenExpiry(token string) time.Time {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}
	}
	var claims struct {
		Exp float64 `json:"exp"`
	}
	if decodeSegment(parts[1], &claims) != nil || claims.Exp <= 0 {
		return time.Time{}
	}
	return time.Unix(int64(claims.Exp), 0)
}
