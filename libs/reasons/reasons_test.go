package reasons

import (
	"regexp"
	"testing"
)

func TestReasonsAreStableCamelCaseWords(t *testing.T) {
	pattern := regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`) // a subset of the API's reason pattern
	for _, r := range All() {
		if !pattern.MatchString(r) || len(r) > 128 {
			t.Errorf("reason %q is not a CamelCase word", r)
		}
	}
	for _, r := range []string{InvalidSpec, MissingSecret, Forbidden, WorkflowJobMissing, CancelRequested, Cancelled, CancelTimedOut, CancelIgnoredTerminal} {
		if !Known(r) {
			t.Errorf("%s missing from the list", r)
		}
	}
	if Known("SomethingElse") {
		t.Error("Known accepts an unlisted reason")
	}
}
