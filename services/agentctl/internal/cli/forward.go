package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"

	"github.com/agentplane/agentplane/libs/grpcx"
)

// forwardToPod port-forwards a free local port on 127.0.0.1 to port of pod through the API
// server (as kubectl port-forward does) and returns the local address and how to stop it.
func forwardToPod(ctx context.Context, cfg *rest.Config, kc kubernetes.Interface, namespace, pod string, port int32) (string, func(), error) {
	rt, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return "", nil, err
	}
	url := kc.CoreV1().RESTClient().Post().Resource("pods").Namespace(namespace).Name(pod).SubResource("portforward").URL()
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, url)
	stopCh, readyCh := make(chan struct{}), make(chan struct{})
	// Errors of single forwarded connections reach client-go's error handler (klog, shown with
	// --debug); agentctl reports the forward's own failure below.
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:" + strconv.Itoa(int(port))}, stopCh, readyCh, nil, nil)
	if err != nil {
		return "", nil, err
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	var once sync.Once
	stop := func() { once.Do(func() { close(stopCh) }) }
	select {
	case <-readyCh:
	case err := <-done:
		if err == nil {
			err = errors.New("the port-forward ended at once")
		}
		return "", nil, fmt.Errorf("port-forward to pod %s/%s port %d: %w", namespace, pod, port, err)
	case <-ctx.Done():
		stop()
		return "", nil, ctx.Err()
	case <-time.After(30 * time.Second):
		stop()
		return "", nil, fmt.Errorf("port-forward to pod %s/%s port %d: not ready within 30s", namespace, pod, port)
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) == 0 {
		stop()
		if err == nil {
			err = errors.New("none forwarded")
		}
		return "", nil, fmt.Errorf("port-forward to pod %s/%s: no local port: %w", namespace, pod, err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(int(ports[0].Local))), stop, nil
}

// readyPod returns a Running, Ready pod among those selector matches in namespace, with the
// container port named portName (or numbered, when portName is a number).
func readyPod(ctx context.Context, kc kubernetes.Interface, namespace string, selector map[string]string, port intstr.IntOrString) (*corev1.Pod, int32, error) {
	pods, err := kc.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(selector).String()})
	if err != nil {
		return nil, 0, err
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil || !podReady(p) {
			continue
		}
		if port.Type == intstr.Int {
			return p, port.IntVal, nil
		}
		for _, c := range p.Spec.Containers {
			for _, cp := range c.Ports {
				if cp.Name == port.StrVal {
					return p, cp.ContainerPort, nil
				}
			}
		}
	}
	return nil, 0, fmt.Errorf("no ready pod with port %s among %s in namespace %s", port.String(), labels.SelectorFromSet(selector), namespace)
}

// The annotations the charts put on a pod that serves TLS (charts/_shared/_common.tpl,
// tlsPodAnnotations): the name its certificate is for, and the ConfigMap and key holding the CA
// that signed it.
const (
	annotationTLSServerName  = "agentplane.dev/tls-server-name"
	annotationTLSCAConfigMap = "agentplane.dev/tls-ca-configmap"
	annotationTLSCAKey       = "agentplane.dev/tls-ca-key"
)

// podTLS is how to verify a pod reached through a port-forward: the name in its certificate and
// the CA (PEM) that signed it, read through the API server with the user's kubeconfig.
type podTLS struct {
	serverName string
	ca         []byte
	// caFrom says where the CA came from, for errors ("ConfigMap agents/watch-gateway-ca").
	caFrom string
}

// tlsOfPod reads how pod serves TLS from its annotations: nil when it serves plaintext. A pod
// that serves TLS but names no CA, or whose CA cannot be read, is an error saying what to do;
// with caFlag set (the user's --tls-ca) the ConfigMap is not read.
func tlsOfPod(ctx context.Context, kc kubernetes.Interface, pod *corev1.Pod, caFlag bool) (*podTLS, error) {
	name := pod.Annotations[annotationTLSServerName]
	if name == "" {
		return nil, nil
	}
	t := &podTLS{serverName: name}
	if caFlag {
		return t, nil
	}
	cm := pod.Annotations[annotationTLSCAConfigMap]
	if cm == "" {
		return nil, withCode(ExitRejected, fmt.Errorf("pod %s/%s serves TLS (for %s) and names no ConfigMap with its CA: pass --tls-ca FILE with the CA that signed its certificate", pod.Namespace, pod.Name, name))
	}
	key := pod.Annotations[annotationTLSCAKey]
	if key == "" {
		key = "ca.crt"
	}
	t.caFrom = "ConfigMap " + pod.Namespace + "/" + cm
	c, err := kc.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, cm, metav1.GetOptions{})
	switch {
	case apierrors.IsForbidden(err):
		return nil, withCode(ExitRejected, fmt.Errorf("pod %s/%s serves TLS; its CA is in %s, which your kubeconfig may not read (%w): bind the gateway's status-viewer Role (it grants get on it) or pass --tls-ca FILE", pod.Namespace, pod.Name, t.caFrom, err))
	case apierrors.IsNotFound(err):
		return nil, withCode(ExitRejected, fmt.Errorf("pod %s/%s serves TLS; its CA should be in %s, which does not exist: pass --tls-ca FILE", pod.Namespace, pod.Name, t.caFrom))
	case err != nil:
		return nil, fmt.Errorf("read the CA of pod %s/%s from %s: %w", pod.Namespace, pod.Name, t.caFrom, err)
	}
	t.ca = []byte(c.Data[key])
	if len(t.ca) == 0 {
		return nil, withCode(ExitRejected, fmt.Errorf("%s has no key %s (the CA of pod %s/%s): pass --tls-ca FILE", t.caFrom, key, pod.Namespace, pod.Name))
	}
	return t, nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// defaultGatewayService is the watch-gateway chart's Service name for a release named
// watch-gateway (make up, the README's per-service install).
const defaultGatewayService = "watch-gateway"

// forwardToGateway port-forwards to the gRPC port of a ready pod behind the Service named name
// in namespace. The Service is taken by name only, never by a label (anyone who may create
// Services could set it), and agentctl sends it no kubeconfig credential either way.
func forwardToGateway(ctx context.Context, cfg *rest.Config, kc kubernetes.Interface, namespace, name string, caFlag bool) (string, *podTLS, func(), error) {
	svc, err := kc.CoreV1().Services(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		hint := ""
		// Named as a suggestion only: a label is no proof (anyone who may create Services can set it).
		if l, lerr := kc.CoreV1().Services(namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=watch-gateway"}); lerr == nil && len(l.Items) > 0 {
			var names []string
			for _, s := range l.Items {
				names = append(names, s.Name)
			}
			hint = fmt.Sprintf(" (Services labelled as watch-gateway's here: %s)", strings.Join(names, ", "))
		}
		return "", nil, nil, withCode(ExitRejected, fmt.Errorf("no Service %s in namespace %s%s: install the watch-gateway chart, pass -n, --gateway-service NAME (the release's Service; a one-release install names it <release>-watch-gateway) or --gateway host:port", name, namespace, hint))
	}
	if err != nil {
		return "", nil, nil, fmt.Errorf("get watch-gateway's Service %s/%s: %w", namespace, name, err)
	}
	var target *intstr.IntOrString
	for _, p := range svc.Spec.Ports {
		if p.Name == "grpc" || len(svc.Spec.Ports) == 1 {
			tp := p.TargetPort
			if tp.Type == intstr.Int && tp.IntVal == 0 {
				tp = intstr.FromInt32(p.Port)
			}
			target = &tp
		}
	}
	if target == nil || len(svc.Spec.Selector) == 0 {
		return "", nil, nil, withCode(ExitRejected, fmt.Errorf("Service %s/%s has no selector or no port named grpc: is it watch-gateway's? (--gateway-service)", namespace, svc.Name))
	}
	pod, port, err := readyPod(ctx, kc, namespace, svc.Spec.Selector, *target)
	if err != nil {
		return "", nil, nil, fmt.Errorf("Service %s/%s: %w", namespace, svc.Name, err)
	}
	t, err := tlsOfPod(ctx, kc, pod, caFlag)
	if err != nil {
		return "", nil, nil, err
	}
	addr, stop, err := forwardToPod(ctx, cfg, kc, namespace, pod.Name, port)
	return addr, t, stop, err
}

// serviceDialer is the collector's Dial in kube mode: a port-forward to a ready pod of the
// service's Deployment, on its container port named grpc, over TLS verified with the pod's CA
// when the pod serves TLS (tlsOfPod). No cluster DNS name is dialled.
func serviceDialer(cfg *rest.Config, kc kubernetes.Interface, namespace string) func(context.Context, string) (string, grpcx.ClientOptions, func(), error) {
	return func(ctx context.Context, service string) (string, grpcx.ClientOptions, func(), error) {
		var o grpcx.ClientOptions
		sel := map[string]string{"app.kubernetes.io/name": service, "app.kubernetes.io/part-of": "agentplane"}
		pod, port, err := readyPod(ctx, kc, namespace, sel, intstr.FromString("grpc"))
		if err != nil {
			return "", o, nil, err
		}
		t, err := tlsOfPod(ctx, kc, pod, false)
		if err != nil {
			return "", o, nil, err
		}
		if t != nil {
			if o.TLS, err = t.credentials(); err != nil {
				return "", o, nil, err
			}
		}
		addr, stop, err := forwardToPod(ctx, cfg, kc, namespace, pod.Name, port)
		return addr, o, stop, err
	}
}
