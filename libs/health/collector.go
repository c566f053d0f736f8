package health

// The collector learns control-plane changes from Kubernetes watches (namespace, Deployments,
// Pods, CRDs) and from each service's grpc.health.v1 Watch stream (push, not poll) and folds
// them into the model after a debounce window. watch-gateway runs it for every client; agentctl's kube mode runs it locally.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/agentplane/agentplane/libs/controller"
	"github.com/agentplane/agentplane/libs/grpcx"
	"github.com/agentplane/agentplane/libs/kubeclient"
	"github.com/agentplane/agentplane/libs/logging"
)

// PartOfSelector finds agentplane's Deployments: a new service appears by carrying the label.
const PartOfSelector = "app.kubernetes.io/part-of=agentplane"

// CollectorOptions configure a Collector.
type CollectorOptions struct {
	Namespace string
	// Targets maps service names to their gRPC address, for services run outside Kubernetes
	// (`make up`) or to override the in-cluster <name>.<namespace>.svc:<port>.
	Targets map[string]string
	// ServicePort is the gRPC port of services found through their Deployment.
	ServicePort string
	// Debounce is how long changes settle before one recomputation.
	Debounce      time.Duration
	RedisAddress  string
	Redis         redis.UniversalClient
	RedisInterval time.Duration
	// APIServerInterval is how often kube-apiserver's /readyz is probed (default 2 s).
	APIServerInterval time.Duration
	TemporalAddress   string
	GRPCAddress       string
	// Client is set when the collector runs in a client (agentctl's kube mode), not in
	// watch-gateway: Redis and the gateway's gRPC are the gateway's own, which a client does not
	// observe, so their items say so instead of "not configured".
	Client bool
	// Self is the name of the service running this collector (watch-gateway): it is serving as
	// long as it reports, so its health is not dialled (its gRPC may demand client
	// certificates the collector does not hold).
	Self string
	// Dial, when set, gives the address to reach a service found through its Deployment instead
	// of its cluster DNS name (agentctl on a laptop: a port-forward to one of its pods), how to
	// dial it (TLS, for a pod that serves it) and a release for when the connection ends. An
	// error leaves the service's health to its Deployment's readiness, and Dial is tried again
	// later.
	Dial func(ctx context.Context, service string) (addr string, opts grpcx.ClientOptions, release func(), err error)
}

// Collector keeps the latest Observation and feeds the hub.
type Collector struct {
	o   CollectorOptions
	kc  kubernetes.Interface
	dyn dynamic.Interface
	hub *Hub

	wg sync.WaitGroup // what Run started: informers, probes, health watches

	mu      sync.Mutex
	obs     Observation
	deploys map[string]appsv1.Deployment
	pods    map[string]podState // by pod name
	svc     map[string]*svcHealth
	watched map[string]context.CancelFunc
	changed chan struct{}
}

// podState is what one agentplane Pod says about its service.
type podState struct {
	service  string
	problems []string
}

type svcHealth struct {
	status     string
	subsystems map[string]string
	// answered: a first result came (a status, or a failed attempt to reach it).
	answered bool
}

// Pending is the number of services whose health is being reached and has not answered yet
// (a one-shot status waits for them, briefly).
func (c *Collector) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for name, h := range c.svc {
		if !h.answered && name != c.o.Self {
			n++
		}
	}
	return n
}

// unanswerable records that a service's health could not be reached, without judging it.
func (c *Collector) unanswerable(name string) {
	c.mu.Lock()
	if h := c.svc[name]; h != nil && !h.answered {
		h.answered = true
		c.mu.Unlock()
		c.poke()
		return
	}
	c.mu.Unlock()
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// NewCollector returns a collector feeding hub.
func NewCollector(kc kubernetes.Interface, dyn dynamic.Interface, hub *Hub, o CollectorOptions) *Collector {
	if o.Debounce <= 0 {
		o.Debounce = 500 * time.Millisecond
	}
	if o.APIServerInterval <= 0 {
		o.APIServerInterval = 2 * time.Second
	}
	if o.RedisInterval <= 0 {
		o.RedisInterval = 2 * time.Second
	}
	if o.ServicePort == "" {
		o.ServicePort = "50051"
	}
	c := &Collector{o: o, kc: kc, dyn: dyn, hub: hub, deploys: map[string]appsv1.Deployment{}, pods: map[string]podState{}, svc: map[string]*svcHealth{},
		watched: map[string]context.CancelFunc{}, changed: make(chan struct{}, 1)}
	c.obs = Observation{Namespace: o.Namespace, RedisAddress: o.RedisAddress, TemporalAddress: o.TemporalAddress, GRPCAddress: o.GRPCAddress, Client: o.Client}
	return c
}

func (c *Collector) poke() {
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

func (c *Collector) edit(f func(o *Observation)) {
	c.mu.Lock()
	f(&c.obs)
	c.mu.Unlock()
	c.poke()
}

// Run watches until ctx ends.
func (c *Collector) Run(ctx context.Context) error {
	log := logging.FromContext(ctx)
	watchErr := func(_ *cache.Reflector, err error) {
		if !errors.Is(err, context.Canceled) {
			c.mu.Lock()
			first := c.obs.APIServerErr == nil
			c.mu.Unlock()
			if first {
				c.hub.Error("a watch on the Kubernetes API failed: " + err.Error() + "; it is retried")
			}
			c.edit(func(o *Observation) { o.APIServerErr = err })
		}
	}
	ok := func() { c.edit(func(o *Observation) { o.APIServerErr = nil }) }

	// The namespace itself.
	nsInf := informers.NewSharedInformerFactoryWithOptions(c.kc, 0, informers.WithTransform(kubeclient.DropManagedFields), informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
		lo.FieldSelector = fields.OneTermEqualSelector("metadata.name", c.o.Namespace).String()
	})).Core().V1().Namespaces().Informer()
	_ = nsInf.SetWatchErrorHandler(watchErr)
	_, _ = nsInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { found := true; ok(); c.edit(func(o *Observation) { o.NamespaceFound = &found }) },
		UpdateFunc: func(any, any) { ok() },
		DeleteFunc: func(any) { found := false; c.edit(func(o *Observation) { o.NamespaceFound = &found }) },
	})

	// agentplane's Deployments.
	depInf := informers.NewSharedInformerFactoryWithOptions(c.kc, 0, informers.WithTransform(kubeclient.DropManagedFields), informers.WithNamespace(c.o.Namespace),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = PartOfSelector })).Apps().V1().Deployments().Informer()
	_ = depInf.SetWatchErrorHandler(watchErr)
	onDep := func(obj any) {
		if d, isDep := obj.(*appsv1.Deployment); isDep {
			c.mu.Lock()
			c.deploys[serviceName(d)] = *d
			c.mu.Unlock()
			c.ensureWatch(ctx, serviceName(d))
			ok()
		}
	}
	_, _ = depInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: onDep, UpdateFunc: func(_, n any) { onDep(n) },
		DeleteFunc: func(obj any) {
			if d, isDep := controller.Unwrap(obj).(*appsv1.Deployment); isDep {
				c.mu.Lock()
				delete(c.deploys, serviceName(d))
				c.mu.Unlock()
				c.poke()
			}
		},
	})

	// agentplane's Pods: what readiness does not say (crash loops, image pulls, OOM kills).
	podInf := informers.NewSharedInformerFactoryWithOptions(c.kc, 0, informers.WithTransform(kubeclient.DropManagedFields), informers.WithNamespace(c.o.Namespace),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = PartOfSelector })).Core().V1().Pods().Informer()
	_ = podInf.SetWatchErrorHandler(watchErr)
	onPod := func(obj any) {
		if p, isPod := obj.(*corev1.Pod); isPod {
			st := podState{service: podService(p), problems: PodProblems(p)}
			c.mu.Lock()
			prev, had := c.pods[p.Name]
			c.pods[p.Name] = st
			c.mu.Unlock()
			if !had || !slices.Equal(prev.problems, st.problems) {
				c.poke()
			}
		}
	}
	_, _ = podInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: onPod, UpdateFunc: func(_, n any) { onPod(n) },
		DeleteFunc: func(obj any) {
			if p, isPod := controller.Unwrap(obj).(*corev1.Pod); isPod {
				c.mu.Lock()
				delete(c.pods, p.Name)
				c.mu.Unlock()
				c.poke()
			}
		},
	})

	// CRDs: agentplane's, and Argo's Workflow for runtime:workflow.
	crdInf := c.crdInformer(watchErr, ok)

	for name := range c.o.Targets {
		c.ensureWatch(ctx, name)
	}
	// Run returns once everything it started has stopped, so a caller that cancels ctx and waits
	// for Run leaves no informer or probe behind.
	defer c.wg.Wait()
	for _, f := range []func(){
		func() { nsInf.Run(ctx.Done()) },
		func() { depInf.Run(ctx.Done()) },
		func() { podInf.Run(ctx.Done()) },
		func() { crdInf.Run(ctx.Done()) },
		func() { c.watchRedis(ctx) },
		func() { c.probeAPIServer(ctx) },
		func() { c.checkJobAPI(ctx) },
	} {
		c.wg.Go(f)
	}
	log.Info("collecting control-plane health", "namespace", c.o.Namespace)
	return c.publish(ctx)
}

// crdInformer watches the CRDs and records which are established, and whether Argo's Workflow
// CRD exists; ok clears a recorded API server error.
func (c *Collector) crdInformer(watchErr cache.WatchErrorHandler, ok func()) cache.SharedIndexInformer {
	crdInf := dynamicinformer.NewDynamicSharedInformerFactory(c.dyn, 0).ForResource(crdGVR).Informer()
	_ = crdInf.SetWatchErrorHandler(watchErr)
	recomputeCRDs := func(any) {
		est := map[string]bool{}
		workflow := false
		for _, obj := range crdInf.GetStore().List() {
			u, isU := obj.(*unstructured.Unstructured)
			if !isU {
				continue
			}
			if u.GetName() == "workflows.argoproj.io" {
				workflow = true
			}
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			established := false
			for _, cnd := range conds {
				if m, isMap := cnd.(map[string]any); isMap && m["type"] == "Established" && m["status"] == "True" {
					established = true
				}
			}
			est[u.GetName()] = established
		}
		ok()
		c.edit(func(o *Observation) { o.CRDsEstablished = est; o.WorkflowCRD = &workflow })
	}
	_, _ = crdInf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: recomputeCRDs, UpdateFunc: func(_, n any) { recomputeCRDs(n) }, DeleteFunc: recomputeCRDs})
	return crdInf
}

// publish recomputes the model after each burst of changes has settled for the debounce window.
func (c *Collector) publish(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-c.changed:
		}
		timer := time.NewTimer(c.o.Debounce)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-timer.C:
		}
		c.hub.Update(Compute(c.observation()))
	}
}

func (c *Collector) observation() Observation {
	c.mu.Lock()
	defer c.mu.Unlock()
	o := c.obs
	names := map[string]bool{}
	for n := range c.deploys {
		names[n] = true
	}
	for n := range c.o.Targets {
		names[n] = true
	}
	problems := map[string][]string{}
	for name, p := range c.pods {
		for _, pr := range p.problems {
			problems[p.service] = append(problems[p.service], name+": "+pr)
		}
	}
	o.Services = nil
	for n := range names {
		s := Service{Name: n}
		if p := problems[n]; len(p) > 0 {
			sort.Strings(p)
			s.PodProblems = p
		}
		if d, found := c.deploys[n]; found {
			s.Deployment = true
			s.Desired = 1
			if d.Spec.Replicas != nil {
				s.Desired = *d.Spec.Replicas
			}
			s.Ready = d.Status.ReadyReplicas
		}
		if h := c.svc[n]; h != nil {
			s.Health = h.status
			s.Subsystems = map[string]string{}
			for k, v := range h.subsystems {
				s.Subsystems[k] = v
			}
		}
		o.Services = append(o.Services, s)
	}
	sort.Slice(o.Services, func(i, j int) bool { return o.Services[i].Name < o.Services[j].Name })
	return o
}

// PodProblems lists what a Pod's containers show beyond not being ready: waiting reasons other
// than starting up, and the last termination when it was not a clean exit.
func PodProblems(p *corev1.Pod) []string {
	var out []string
	seen := map[string]bool{}
	add := func(r string) {
		if !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	if p.Status.Phase == corev1.PodFailed {
		add("pod failed" + suffix(p.Status.Reason))
	}
	for _, cs := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
		if w := cs.State.Waiting; w != nil && w.Reason != "" && w.Reason != "ContainerCreating" && w.Reason != "PodInitializing" {
			add(w.Reason)
		}
		if t := cs.LastTerminationState.Terminated; t != nil && t.Reason == "OOMKilled" {
			add("OOMKilled")
		}
	}
	return out
}

func suffix(reason string) string {
	if reason == "" {
		return ""
	}
	return " (" + reason + ")"
}

func podService(p *corev1.Pod) string {
	if n := p.Labels["app.kubernetes.io/name"]; n != "" {
		return n
	}
	return p.Name
}

func serviceName(d *appsv1.Deployment) string {
	if n := d.Labels["app.kubernetes.io/name"]; n != "" {
		return n
	}
	return d.Name
}

func (c *Collector) target(name string) string {
	if t, found := c.o.Targets[name]; found {
		return t
	}
	return name + "." + c.o.Namespace + ".svc:" + c.o.ServicePort
}

// ensureWatch starts following a service's grpc.health.v1 statuses once.
func (c *Collector) ensureWatch(ctx context.Context, name string) {
	c.mu.Lock()
	if _, running := c.watched[name]; running {
		c.mu.Unlock()
		return
	}
	wctx, cancel := context.WithCancel(ctx)
	c.watched[name] = cancel
	c.svc[name] = &svcHealth{subsystems: map[string]string{}}
	c.mu.Unlock()
	if name == c.o.Self {
		c.setHealth(name, "", "SERVING")
		return
	}
	c.wg.Go(func() { c.followHealth(wctx, name) })
}

// followHealth lists the service's health names, then holds a Watch stream on each; when the
// connection breaks the service is UNREACHABLE until the streams come back.
func (c *Collector) followHealth(ctx context.Context, name string) {
	if _, listed := c.o.Targets[name]; c.o.Dial != nil && !listed {
		c.followDialled(ctx, name)
		return
	}
	c.followAt(ctx, name, c.target(name), grpcx.ClientOptions{}, false)
}

// followDialled follows a service through the addresses Dial gives, a new one each time the
// connection is lost, waiting longer between attempts while they keep failing.
func (c *Collector) followDialled(ctx context.Context, name string) {
	backoff := time.Second
	for ctx.Err() == nil {
		addr, opts, release, err := c.o.Dial(ctx, name)
		if err != nil {
			logging.FromContext(ctx).Debug("cannot reach a service's health", "service", name, "err", err)
			c.unanswerable(name)
		} else {
			start := time.Now()
			c.followAt(ctx, name, addr, opts, true) // returns once the connection is lost
			release()
			if time.Since(start) > time.Minute {
				backoff = time.Second
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}

// followAt follows a service's health at addr until ctx ends; with once, it returns at the
// first lost connection instead of reconnecting (the address is a port-forward that died).
func (c *Collector) followAt(ctx context.Context, name, addr string, opts grpcx.ClientOptions, once bool) {
	conn, err := grpcx.Dial(addr, opts)
	if err != nil {
		c.setHealth(name, "", "UNREACHABLE")
		return
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	backoff := 200 * time.Millisecond
	for ctx.Err() == nil {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var callOpts []grpc.CallOption
		if !once { // a port-forward that cannot connect will not start to: fail fast instead
			callOpts = append(callOpts, grpc.WaitForReady(true))
		}
		list, err := client.List(lctx, &healthpb.HealthListRequest{}, callOpts...)
		cancel()
		if err != nil {
			c.setHealth(name, "", "UNREACHABLE")
			if once {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		backoff = 200 * time.Millisecond
		c.watchAll(ctx, name, client, list)
		if ctx.Err() == nil {
			c.setHealth(name, "", "UNREACHABLE")
			if once {
				return
			}
		}
	}
}

// watchAll watches each health service list names (the overall one and each "<svc>/<part>")
// until one stream breaks, then returns so that the caller relists and rewatches them all.
func (c *Collector) watchAll(ctx context.Context, name string, client healthpb.HealthClient, list *healthpb.HealthListResponse) {
	var wg sync.WaitGroup
	var broke sync.Once
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	for svc := range list.GetStatuses() {
		if svc != "" && !strings.Contains(svc, "/") {
			continue // a service's own API names mirror its overall status
		}
		wg.Go(func() {
			defer stop() // one broken stream: relist and rewatch them all
			stream, err := client.Watch(sctx, &healthpb.HealthCheckRequest{Service: svc})
			if err != nil {
				return
			}
			for {
				resp, err := stream.Recv()
				if err != nil {
					if sctx.Err() == nil {
						broke.Do(func() {
							c.hub.Error(fmt.Sprintf("%s: its health stream broke (%s); reconnecting", name, status.Code(err)))
						})
					}
					return
				}
				c.setHealth(name, svc, resp.GetStatus().String())
			}
		})
	}
	wg.Wait()
}

func (c *Collector) setHealth(name, svc, st string) {
	c.mu.Lock()
	h := c.svc[name]
	if h == nil {
		h = &svcHealth{subsystems: map[string]string{}}
		c.svc[name] = h
	}
	h.answered = true
	if svc == "" {
		h.status = st
		if st == "UNREACHABLE" {
			h.subsystems = map[string]string{}
		}
	} else {
		h.subsystems[svc] = st
	}
	c.mu.Unlock()
	c.poke()
}

// probeEvery calls probe every interval (each call bounded to a second) until ctx ends, and
// changed with the result whenever it differs from the previous one (the first result counts as a
// change from "not checked").
func probeEvery(ctx context.Context, interval time.Duration, probe func(context.Context) error, changed func(err, last error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	last := errNotChecked
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := probe(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if (err == nil) != (last == nil) || (err != nil && last != nil && err.Error() != last.Error()) {
			changed(err, last)
		}
		last = err
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

var errNotChecked = errors.New("not checked")

// watchRedis pings Redis: Redis has no change feed for its own liveness, so it is checked on an
// interval.
func (c *Collector) watchRedis(ctx context.Context) {
	if c.o.Redis == nil {
		return
	}
	probeEvery(ctx, c.o.RedisInterval, func(ctx context.Context) error { return c.o.Redis.Ping(ctx).Err() }, func(err, last error) {
		if err != nil && (last == nil || errors.Is(last, errNotChecked)) {
			c.hub.Error("Redis at " + c.o.RedisAddress + " is unreachable: " + err.Error())
		}
		c.edit(func(o *Observation) { o.RedisErr = err })
	})
}

// probeAPIServer asks kube-apiserver's /readyz every APIServerInterval (granted to every caller
// by the default system:public-info-viewer role) and reports each change.
func (c *Collector) probeAPIServer(ctx context.Context) {
	rc := c.kc.Discovery().RESTClient()
	if rc == nil {
		return
	}
	probeEvery(ctx, c.o.APIServerInterval, func(ctx context.Context) error { return rc.Get().AbsPath("/readyz").Do(ctx).Error() },
		func(err, _ error) { c.edit(func(o *Observation) { o.APIServerProbeErr = err }) })
}

func (c *Collector) checkJobAPI(ctx context.Context) {
	_, err := c.kc.Discovery().ServerResourcesForGroupVersion("batch/v1")
	served := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		logging.FromContext(ctx).Warn("discover batch/v1", "err", err)
		return
	}
	c.edit(func(o *Observation) { o.JobAPI = &served })
}
