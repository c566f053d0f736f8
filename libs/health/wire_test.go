package health

import (
	"encoding/json"
	"testing"
	"time"
)

func TestEventJSONFollowsTheSeed(t *testing.T) {
	at := time.Date(2026, 1, 30, 18, 15, 2, 0, time.UTC)
	cases := []struct {
		ev   Event
		want string
	}{
		{Event{Type: Snapshot, GeneratedAt: at, Items: []Item{{Component: "agents-controller", Namespace: "agents", Status: Healthy}}},
			`{"type":"snapshot","generated_at":"2026-01-30T18:15:02Z","items":[{"component":"agents-controller","namespace":"agents","status":"healthy","message":""}]}`},
		{Event{Type: Delta, GeneratedAt: at, Items: []Item{{Component: "runtime:temporal", Status: Degraded, Message: "temporal connection retrying"}}},
			`{"type":"delta","generated_at":"2026-01-30T18:15:02Z","changes":[{"component":"runtime:temporal","status":"degraded","message":"temporal connection retrying"}]}`},
		{Event{Type: Heartbeat, GeneratedAt: at}, `{"type":"heartbeat","generated_at":"2026-01-30T18:15:02Z"}`},
		{Event{Type: ErrorEv, GeneratedAt: at, Message: "watch restarted"}, `{"type":"error","generated_at":"2026-01-30T18:15:02Z","message":"watch restarted"}`},
	}
	for _, tc := range cases {
		b, err := json.Marshal(tc.ev)
		if err != nil || string(b) != tc.want {
			t.Fatalf("marshal %s:\n got %s\nwant %s", tc.ev.Type, b, tc.want)
		}
		var back Event
		if err := json.Unmarshal(b, &back); err != nil || back.Type != tc.ev.Type || len(back.Items) != len(tc.ev.Items) || !back.GeneratedAt.Equal(at) {
			t.Fatalf("round trip %s: %+v %v", tc.ev.Type, back, err)
		}
	}
}
