package redact

import (
	"strings"
	"testing"
)

// FuzzRedactNeverLeaksTheCorpus embeds each seeded secret, in its context, between arbitrary text
// and checks that the secret never survives, whatever surrounds it. Known Secret values are checked
// the same way.
func FuzzRedactNeverLeaksTheCorpus(f *testing.F) {
	f.Add("", "", uint8(0))
	f.Add("error: ", " (retrying)", uint8(3))
	f.Add("x", "y", uint8(9))
	f.Add("\n", "\t", uint8(12))
	f.Fuzz(func(t *testing.T, prefix, suffix string, pick uint8) {
		c := corpus[int(pick)%len(corpus)]
		text := prefix + c.text + suffix
		if out := String(text); strings.Contains(out, c.secret) && !strings.Contains(prefix+suffix, c.secret) {
			t.Fatalf("secret %q survived in %q", c.secret, out)
		}
		known := "K8sSecretValue-" + c.name
		text = prefix + known + suffix
		if out := New(known).String(text); strings.Contains(out, known) {
			t.Fatalf("known value survived in %q", out)
		}
	})
}
