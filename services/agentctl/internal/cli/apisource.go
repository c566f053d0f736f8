package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"

	"github.com/agentplane/agentplane/libs/health"
)

// The aggregated API watch-gateway serves through the Kubernetes API server (its chart's
// apiService.enabled): the API server authenticates agentctl with whatever the kubeconfig uses
// (certificates, tokens, exec and OIDC plugins) and vouches for the user to the gateway, so no
// credential of the user's ever reaches the gateway.
const (
	gatewayAPIGroup   = "gateway.agents.proompteng.ai"
	gatewayAPIVersion = "v1alpha1"
)

// servesGatewayAPI reports whether the API server serves the gateway's aggregated API.
func servesGatewayAPI(d discovery.DiscoveryInterface) (bool, error) {
	_, err := d.ServerResourcesForGroupVersion(gatewayAPIGroup + "/" + gatewayAPIVersion)
	if err == nil {
		return true, nil
	}
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return false, err
}

// apiSource reads the gateway's status through the API server.
type apiSource struct {
	rc        rest.Interface
	namespace string
}

func (a *apiSource) path(resource string) string {
	return "/apis/" + gatewayAPIGroup + "/" + gatewayAPIVersion + "/namespaces/" + a.namespace + "/" + resource
}

func (a *apiSource) close() {}

// body is a response's body, or its error with the message of the Status the gateway sent
// (Result.Raw would give client-go's generic one).
func body(res rest.Result) ([]byte, error) {
	if err := res.Error(); err != nil {
		return nil, err
	}
	return res.Raw()
}

func (a *apiSource) snapshot(ctx context.Context) (health.Event, error) {
	raw, err := body(a.rc.Get().AbsPath(a.path("controlplanestatus")).Do(ctx))
	if err != nil {
		return health.Event{}, err
	}
	var ev health.Event
	if err := json.Unmarshal(raw, &ev); err != nil {
		return health.Event{}, fmt.Errorf("the gateway's status is not an event: %w", err)
	}
	return ev, nil
}

// stream reads the watch: one JSON event per line, resuming after cursor.
func (a *apiSource) stream(ctx context.Context, cursor string, followOnly bool, heartbeat time.Duration, emit func(health.Event)) error {
	req := a.rc.Get().AbsPath(a.path("controlplanestatus")).Param("watch", "true").Param("heartbeat", heartbeat.String())
	if cursor != "" {
		req = req.Param("resourceVersion", cursor)
	}
	body, err := req.Stream(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = body.Close() }()
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	first := true
	for sc.Scan() {
		var ev health.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return fmt.Errorf("the gateway sent a line that is not an event: %w", err)
		}
		// --follow-only: no snapshot to begin with (a resumed stream's snapshot, sent when the
		// cursor has expired, is news and is shown), as the gRPC stream does.
		skip := first && followOnly && cursor == "" && ev.Type == health.Snapshot
		first = false
		if !skip {
			emit(ev)
		}
	}
	if ctx.Err() != nil || deadlineReached(ctx) {
		return nil
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return errors.New("the status stream ended")
}

// history reads the recorded transitions.
func (a *apiSource) history(ctx context.Context, since time.Duration, limit int) (historyJSON, error) {
	raw, err := body(a.rc.Get().AbsPath(a.path("controlplanestatushistory")).Param("since", since.String()).Param("limit", fmt.Sprint(limit)).Do(ctx))
	if err != nil {
		return historyJSON{}, err
	}
	var reply struct {
		GeneratedAt time.Time  `json:"generated_at"`
		Retention   string     `json:"retention"`
		Truncated   bool       `json:"truncated"`
		Oldest      *time.Time `json:"oldest"`
		Transitions []struct {
			Component, Status, Previous, Message string
			At                                   time.Time
		} `json:"transitions"`
	}
	if err := json.Unmarshal(raw, &reply); err != nil {
		return historyJSON{}, fmt.Errorf("the gateway's history is not JSON: %w", err)
	}
	out := historyJSON{GeneratedAt: ts(reply.GeneratedAt), Since: since.String(), Retention: reply.Retention, Truncated: reply.Truncated,
		Transitions: []transitionJSON{}}
	if reply.Oldest != nil {
		out.Oldest = ts(*reply.Oldest)
	}
	for _, t := range reply.Transitions {
		out.Transitions = append(out.Transitions, transitionJSON{At: ts(t.At), Component: t.Component, Previous: t.Previous, Status: t.Status, Message: t.Message})
	}
	return out, nil
}
