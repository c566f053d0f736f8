package cli

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
)

// TestTheGatewayIsFoundByNameOnly (#31 item 3): a Service that merely carries watch-gateway's
// label is never used; it is named in the error as a suggestion, and the error says how to pick
// a Service (--gateway-service).
func TestTheGatewayIsFoundByNameOnly(t *testing.T) {
	impostor := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "agentplane-watch-gateway", Namespace: "agents",
		Labels: map[string]string{"app.kubernetes.io/name": "watch-gateway"}},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "x"}, Ports: []corev1.ServicePort{{Name: "grpc", Port: 50051}}}}
	kc := fake.NewClientset(impostor)
	_, _, err := forwardToGateway(context.Background(), &rest.Config{}, kc, "agents", defaultGatewayService)
	if err == nil || !strings.Contains(err.Error(), "no Service watch-gateway in namespace agents") ||
		!strings.Contains(err.Error(), "agentplane-watch-gateway") || !strings.Contains(err.Error(), "--gateway-service") {
		t.Fatalf("with only a labelled Service of another name: %v, want a refusal naming it as a suggestion", err)
	}
	if exitCode(err) != ExitRejected {
		t.Errorf("exit code %d, want %d", exitCode(err), ExitRejected)
	}
}
