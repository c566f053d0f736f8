package testenv

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// HostIP is an IPv4 address of this machine other than loopback, which an EndpointSlice may
// name (the API server refuses loopback endpoints): where a test serves what the API server dials.
func HostIP() (string, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return "", err
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() {
			return n.IP.String(), nil
		}
	}
	return "", errors.New("this machine has no IPv4 address but loopback: the API server cannot be pointed at a test server")
}

// EndpointSlice points the Service namespace/service's port portName at ip:port, as the
// endpoints controller would for a pod there (the test API server runs none): an aggregated API
// served by a test process is then dialled by the API server (--enable-aggregator-routing).
func (k *Kube) EndpointSlice(ctx context.Context, namespace, service, portName, ip string, port int) error {
	if port < 1 || port > 65535 {
		return fmt.Errorf("port %d is not a TCP port", port)
	}
	port32 := int32(port) //nolint:gosec // G115: checked above
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: service + "-test", Namespace: namespace, Labels: map[string]string{discoveryv1.LabelServiceName: service}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To(portName), Port: ptr.To(port32), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	if _, err := k.Client.DiscoveryV1().EndpointSlices(namespace).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return err
		}
		if _, err := k.Client.DiscoveryV1().EndpointSlices(namespace).Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// WaitAPIService waits until the API server reports the APIService name Available (it has
// read the version's discovery from the server behind it).
func (k *Kube) WaitAPIService(ctx context.Context, name string) error {
	if _, stderr, err := k.RunKubectl(ctx, "wait", "--for=condition=Available", "--timeout=60s", "apiservice/"+name); err != nil {
		out, _, _ := k.RunKubectl(ctx, "get", "apiservice/"+name, "-o", "jsonpath={.status.conditions}")
		return fmt.Errorf("the APIService %s did not become Available: %w: %s (conditions: %s)", name, err, stderr, out)
	}
	return nil
}

// APIService registers group/version as an aggregated API served at ip:port, as a chart does
// for a pod: a Service without a selector named service in namespace (port apiservice), its
// EndpointSlice, and the APIService trusting caPEM for the Service's name (service.namespace.svc).
// It waits until the API server reports the APIService Available.
func (k *Kube) APIService(ctx context.Context, namespace, service, group, version string, caPEM []byte, ip string, port int) error {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: service, Namespace: namespace},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "apiservice", Port: 443}}}}
	if _, err := k.Client.CoreV1().Services(namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	if err := k.EndpointSlice(ctx, namespace, service, "apiservice", ip, port); err != nil {
		return err
	}
	manifest := fmt.Sprintf(`apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata:
  name: %[2]s.%[1]s
spec:
  group: %[1]s
  version: %[2]s
  groupPriorityMinimum: 1000
  versionPriority: 15
  caBundle: %[3]s
  service:
    namespace: %[4]s
    name: %[5]s
    port: 443
`, group, version, base64.StdEncoding.EncodeToString(caPEM), namespace, service)
	file := filepath.Join(k.dir, "apiservice-"+group+"-"+strconv.Itoa(port)+".yaml")
	if err := os.WriteFile(file, []byte(manifest), 0o600); err != nil {
		return err
	}
	if _, stderr, err := k.RunKubectl(ctx, "apply", "--server-side", "--force-conflicts", "-f", file); err != nil {
		return fmt.Errorf("apply the APIService: %w: %s", err, stderr)
	}
	return k.WaitAPIService(ctx, version+"."+group)
}
