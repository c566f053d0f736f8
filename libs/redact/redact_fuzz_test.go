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
		// A Secret's value as stored (with the newline `echo` leaves, a quote, a backslash), in
		// each form it takes in a message: as it is, trimmed, base64, JSON- and Go-quoted.
		stored := "K8s\"Secret\\Value-" + c.name + "\n"
		forms := secretForms(stored)
		form := forms[(int(pick)/len(corpus))%len(forms)]
		text = prefix + form + suffix
		if out := New(stored).String(text); strings.Contains(out, form) && !strings.Contains(prefix+suffix, form) {
			t.Fatalf("form %q of a known value survived in %q", form, out)
		}
	})
}
