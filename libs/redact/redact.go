// Package redact removes secrets from text before it leaves a service in an event, a log line or
// an error: bearer tokens, JWTs, well-known API key shapes, private keys, passwords in URLs,
// key=value secrets, and the exact values of Secrets the caller knows about.
package redact

import (
	"encoding/base64"
	"encoding/json"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Mask replaces every secret found.
const Mask = "[REDACTED]"

// minValueLen: shorter known values are not redacted by exact match (replacing "a" everywhere
// would destroy the message and hide nothing worth hiding).
const minValueLen = 4

type rule struct {
	re   *regexp.Regexp
	repl string
}

var rules = []rule{
	// PEM private keys, whole blocks.
	{regexp.MustCompile(`-----BEGIN[A-Z ]*PRIVATE KEY-----[\s\S]*?(-----END[A-Z ]*PRIVATE KEY-----|$)`), Mask},
	// Authorization headers and bearer/basic tokens.
	{regexp.MustCompile(`(?i)(bearer|basic|token)(\s+)[A-Za-z0-9\-._~+/]+=*`), "${1}${2}" + Mask},
	// JWTs (header.payload.signature, base64url).
	{regexp.MustCompile(`eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]*)?`), Mask},
	// Well-known key shapes: GitHub, Slack, AWS access keys, OpenAI/Anthropic-style, Google API keys.
	{regexp.MustCompile(`(gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|xox[abposr]-[A-Za-z0-9-]{10,}|(AKIA|ASIA)[0-9A-Z]{16}|sk-[A-Za-z0-9_-]{16,}|AIza[0-9A-Za-z_-]{30,})`), Mask},
	// Credentials in URLs: scheme://user:password@host keeps the user.
	{regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://[^:/?#@\s]*):[^@\s/]*@`), "${1}:" + Mask + "@"},
	// key=value and key: value secrets, quoted or not. No leading word boundary: "dbpassword=x"
	// is a secret too.
	{regexp.MustCompile(`(?i)(password|passwd|pwd|secret|token|api[_-]?key|apikey|access[_-]?key|private[_-]?key|client[_-]?secret|credentials?|authorization|auth)("?\s*[:=]\s*)("[^"]*"?|'[^']*'?|[^\s,;&"']+)`), "${1}${2}" + Mask},
}

// Redactor redacts the shapes above plus a set of known secret values.
type Redactor struct {
	values []string
}

// New returns a Redactor that also removes each of values wherever it appears, in the forms a
// value takes in the text around it: as stored, without the whitespace a Secret's value often
// ends with ("token\n" written by `echo`), base64-encoded (standard and URL alphabets, padded or
// not: a Secret's data as the API returns it, a basic-auth header), JSON- and Go-quoted (a
// value with quotes, backslashes or newlines inside a logged struct or error).
func New(values ...string) *Redactor {
	r := &Redactor{}
	seen := map[string]bool{}
	add := func(v string) {
		if len(v) >= minValueLen && !seen[v] {
			seen[v] = true
			r.values = append(r.values, v)
		}
	}
	for _, v := range values {
		if len(strings.TrimSpace(v)) < minValueLen {
			continue // too short to tell from ordinary text, in any form
		}
		for _, form := range []string{v, strings.TrimSpace(v), strings.TrimRight(v, " \t\r\n")} {
			add(form)
			add(base64.StdEncoding.EncodeToString([]byte(form)))
			add(base64.RawStdEncoding.EncodeToString([]byte(form)))
			add(base64.URLEncoding.EncodeToString([]byte(form)))
			add(base64.RawURLEncoding.EncodeToString([]byte(form)))
			if j, err := json.Marshal(form); err == nil {
				add(string(j[1 : len(j)-1]))
			}
			q := strconv.Quote(form)
			add(q[1 : len(q)-1])
		}
	}
	// Longest first, so a value that contains another is removed whole.
	sort.Slice(r.values, func(i, j int) bool { return len(r.values[i]) > len(r.values[j]) })
	return r
}

// String returns s with every secret replaced by Mask.
func (r *Redactor) String(s string) string {
	for _, v := range r.values {
		s = strings.ReplaceAll(s, v, Mask)
	}
	for _, rl := range rules {
		s = rl.re.ReplaceAllString(s, rl.repl)
	}
	return s
}

// String redacts the known shapes only.
func String(s string) string { return New().String(s) }

// Truncate cuts s to at most n bytes on a rune boundary, marking the cut. Redact first, then
// truncate: a cut secret would no longer match its shape.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "…"
	cut := n - len(mark)
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }
