package testenv

import "testing"

// The kernel repeats a just-released port often; FreePort must not.
func TestFreePortNeverRepeatsAPortItGave(t *testing.T) {
	seen := map[int]bool{}
	for i := range 2000 {
		p, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("call %d returned port %d a second time", i+1, p)
		}
		seen[p] = true
	}
}
