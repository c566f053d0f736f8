//go:build integration

package emitter

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	"github.com/agentplane/agentplane/libs/grpcx"
	"github.com/agentplane/agentplane/libs/kubeclient"
	"github.com/agentplane/agentplane/libs/redisx"
	"github.com/agentplane/agentplane/libs/testenv"
	pb "github.com/agentplane/agentplane/proto/agentplane/v1"
	"github.com/agentplane/agentplane/services/event-emitter/internal/limiter"
)

var (
	env *testenv.Kube
	rds *testenv.Redis
	kc  client.Client
	kcs kubernetes.Interface
	dyn dynamic.Interface
)

func TestMain(m *testing.M) {
	os.Exit(testenv.NoLeaks(func() int {
		var err error
		if env, err = testenv.StartKube(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer env.Stop()
		if rds, err = testenv.StartRedis(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer rds.Close()
		cfg := *env.Config
		cfg.QPS, cfg.Burst = 500, 1000
		kcs = kubernetes.NewForConfigOrDie(&cfg)
		dyn = dynamic.NewForConfigOrDie(&cfg)
		if kc, err = client.New(&cfg, client.Options{Scheme: kubeclient.Scheme}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return m.Run()
	}()))
}

// instance is one event-emitter replica: its own limiter (on the shared Redis), writer and
// gRPC server.
type instance struct {
	e      *Emitter
	lim    *limiter.Limiter
	client pb.EventEmitterClient

	stormKey string // the storm's first object's bucket key

	mu sync.Mutex
	// switches are the limiter's degraded reports in order; degradedFor sums the time spent in
	// the in-process fallback, periods counts its spells.
	switches    []bool
	since       time.Time
	degradedFor time.Duration
}

// onDegraded is what the service wires to its health and metrics: here it keeps the record.
func (in *instance) onDegraded(d bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.switches = append(in.switches, d)
	if d {
		in.since = time.Now()
	} else {
		in.degradedFor += time.Since(in.since)
	}
}

// fallback returns the switches so far and the in-process allowance they earned: each spell in
// the fallback buckets may allow a full burst plus what refills during it.
func (in *instance) fallback(burst int, ratePerS float64) ([]bool, float64) {
	in.mu.Lock()
	defer in.mu.Unlock()
	spells := 0
	for _, d := range in.switches {
		if d {
			spells++
		}
	}
	return append([]bool(nil), in.switches...), float64(spells*burst) + ratePerS*in.degradedFor.Seconds()
}

// singleRedis is a client of the test's single redis-server, as the service builds it.
func singleRedis(t testing.TB) redis.UniversalClient {
	t.Helper()
	return redisClient(t, redisx.Config{URL: "redis://" + rds.Addr + "/0"})
}

func redisClient(t testing.TB, c redisx.Config) redis.UniversalClient {
	t.Helper()
	rdb, err := redisx.New(c, redisx.Options{Timeout: 100 * time.Millisecond, PoolSize: 64})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

func startInstance(t testing.TB, name string, cfg Config, lcfg limiter.Config) *instance {
	return startInstanceOn(t, name, cfg, lcfg, singleRedis(t))
}

func startInstanceOn(t testing.TB, name string, cfg Config, lcfg limiter.Config, rdb redis.UniversalClient) *instance {
	t.Helper()
	if lcfg.ProbeInterval == 0 {
		lcfg.ProbeInterval = 200 * time.Millisecond
	}
	in := &instance{}
	lim, err := limiter.New(rdb, lcfg, in.onDegraded, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The tests are about Redis-backed limits: an instance that fell back to in-process buckets
	// at start would pass them for the wrong reason.
	if err := lim.Load(context.Background()); err != nil {
		t.Fatalf("load the limiter's script into Redis: %v", err)
	}
	cfg.DefaultInstance = name
	e := New(kcs, dyn, lim, NewMetrics(nil), cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = e.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	srv := grpcx.NewServer(prometheus.NewRegistry())
	pb.RegisterEventEmitterServer(srv, NewServer(e))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	in.e, in.lim, in.client = e, lim, pb.NewEventEmitterClient(conn)
	return in
}

func namespace(t testing.TB) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "ev-"}}
	if err := kc.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func agentRun(t testing.TB, ns, name string, secrets ...string) *agentsv1alpha1.AgentRun {
	t.Helper()
	run := &agentsv1alpha1.AgentRun{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: agentsv1alpha1.AgentRunSpec{AgentRef: agentsv1alpha1.LocalRef{Name: "codex"},
			Runtime: agentsv1alpha1.RuntimeSpec{Type: "job"}, Secrets: secrets},
	}
	if err := kc.Create(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	return run
}

func ref(run *agentsv1alpha1.AgentRun) *pb.EventObject {
	return &pb.EventObject{ApiVersion: agentsv1alpha1.GroupVersion.String(), Kind: "AgentRun", Namespace: run.Namespace, Name: run.Name, Uid: string(run.UID)}
}

func warning(run *agentsv1alpha1.AgentRun, reason, note string) *pb.EmitRequest {
	return &pb.EmitRequest{Object: ref(run), Type: "Warning", Reason: reason, Note: note, Action: "CreateJob", ReportingController: "agentplane.proompteng.ai/run-controller"}
}

// occurrences counts, through the API, how many times events were recorded about an object:
// one per Event, or its series count.
func occurrences(t testing.TB, ns string) map[string]int {
	t.Helper()
	list, err := kcs.EventsV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, ev := range list.Items {
		n := 1
		if ev.Series != nil {
			n = int(ev.Series.Count)
		} else if ev.DeprecatedCount > 1 {
			n = int(ev.DeprecatedCount)
		}
		out[ev.Regarding.Name] += n
	}
	return out
}

func eventually(t testing.TB, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		if err = cond(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: %v", what, err)
}

func TestWarningShowsInDescribeAndRepeatsBecomeASeries(t *testing.T) {
	in := startInstance(t, "replica-a", Config{Enabled: true}, limiter.Config{PerMinute: 600, Burst: 10})
	ns := namespace(t)
	run := agentRun(t, ns, "bad-spec")
	ctx := context.Background()
	for i, want := range []pb.EmitOutcome{pb.EmitOutcome_EMIT_OUTCOME_EMITTED, pb.EmitOutcome_EMIT_OUTCOME_COUNTED, pb.EmitOutcome_EMIT_OUTCOME_COUNTED} {
		resp, err := in.client.Emit(ctx, warning(run, "InvalidSpec", "spec.runtime.config.image is required"))
		if err != nil || resp.GetOutcome() != want {
			t.Fatalf("emit %d: %v %v, want %v", i, resp, err, want)
		}
	}
	if in.e.API() != APIEventsV1 {
		t.Fatalf("API = %q: the API server serves events.k8s.io/v1", in.e.API())
	}
	eventually(t, "one event with a series of 3", func() error {
		list, err := kcs.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(list.Items) != 1 || list.Items[0].Series == nil || list.Items[0].Series.Count != 3 {
			return fmt.Errorf("events = %d, first %+v", len(list.Items), list.Items)
		}
		ev := list.Items[0]
		if ev.Reason != "InvalidSpec" || ev.Type != "Warning" || ev.Regarding.UID != run.UID || ev.ReportingController != "agentplane.proompteng.ai/run-controller" {
			return fmt.Errorf("event = %+v", ev)
		}
		return nil
	})
	out, errOut, err := env.RunKubectl(ctx, "-n", ns, "describe", "agentrun", "bad-spec")
	if err != nil {
		t.Fatalf("describe: %v %s", err, errOut)
	}
	events := out[strings.Index(out, "Events:"):]
	if !strings.Contains(events, "Warning") || !strings.Contains(events, "InvalidSpec") || !strings.Contains(events, "spec.runtime.config.image is required") {
		t.Fatalf("kubectl describe does not show the warning:\n%s", out)
	}
}

func TestCoreV1EventsWhenForced(t *testing.T) {
	in := startInstance(t, "replica-core", Config{Enabled: true, API: APICoreV1}, limiter.Config{PerMinute: 600, Burst: 10})
	ns := namespace(t)
	run := agentRun(t, ns, "core")
	for i := 0; i < 2; i++ {
		if _, err := in.client.Emit(context.Background(), warning(run, "MissingSecret", `secret "github-token" not found`)); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "one core/v1 event with count 2", func() error {
		list, err := kcs.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(list.Items) != 1 || list.Items[0].Count != 2 || list.Items[0].InvolvedObject.Name != "core" || list.Items[0].Reason != "MissingSecret" {
			return fmt.Errorf("events = %+v", list.Items)
		}
		return nil
	})
}

func TestDisabledEmitsNothing(t *testing.T) {
	in := startInstance(t, "replica-off", Config{Enabled: false}, limiter.Config{PerMinute: 600, Burst: 10})
	ns := namespace(t)
	run := agentRun(t, ns, "quiet")
	resp, err := in.client.Emit(context.Background(), warning(run, "Forbidden", "image not allowed"))
	if err != nil || resp.GetOutcome() != pb.EmitOutcome_EMIT_OUTCOME_DISABLED {
		t.Fatalf("emit = %v %v", resp, err)
	}
	// Emit queues before it returns: nothing queued means nothing will be written.
	if n := in.e.pending(); n != 0 {
		t.Fatalf("%d events queued while disabled", n)
	}
	if n := occurrences(t, ns)["quiet"]; n != 0 {
		t.Fatalf("%d events written while disabled", n)
	}
}

func TestNoSecretReachesAnEvent(t *testing.T) {
	in := startInstance(t, "replica-s", Config{Enabled: true}, limiter.Config{PerMinute: 600, Burst: 10})
	ns := namespace(t)
	if err := kc.Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vcs"},
		StringData: map[string]string{"token": "plain-looking-value-42"}}); err != nil {
		t.Fatal(err)
	}
	run := agentRun(t, ns, "leaky", "vcs")
	note := "push failed for plain-looking-value-42 using Authorization: Bearer abc.def.ghi and password=hunter22 " + strings.Repeat("x", 2000)
	if _, err := in.client.Emit(context.Background(), warning(run, "Forbidden", note)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "sanitized event", func() error {
		list, err := kcs.EventsV1().Events(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil || len(list.Items) != 1 {
			return fmt.Errorf("events: %v %d", err, len(list.Items))
		}
		n := list.Items[0].Note
		for _, secret := range []string{"plain-looking-value-42", "abc.def.ghi", "hunter22"} {
			if strings.Contains(n, secret) {
				t.Fatalf("secret %q reached the event: %q", secret, n[:200])
			}
		}
		if len(n) > 1024 {
			t.Fatalf("note is %d bytes, over the API's 1024", len(n))
		}
		return nil
	})
}

func TestBadRequestsAreRefused(t *testing.T) {
	in := startInstance(t, "replica-bad", Config{Enabled: true}, limiter.Config{PerMinute: 600, Burst: 10})
	ns := namespace(t)
	run := agentRun(t, ns, "x")
	for _, req := range []*pb.EmitRequest{
		warning(run, "SomethingBroke", "n"),
		{Object: ref(run), Type: "Error", Reason: "InvalidSpec"},
		{Object: &pb.EventObject{Kind: "AgentRun"}, Type: "Warning", Reason: "InvalidSpec"},
	} {
		_, err := in.client.Emit(context.Background(), req)
		if grpcstatus.Code(err) != codes.InvalidArgument {
			t.Fatalf("emit %v: %v, want InvalidArgument", req, err)
		}
	}
}

// TestStormStaysWithinTheBucket sends 10,000 failures about 50 objects through 4 replicas sharing
// Redis. Counted through the API, no object gets more events than the shared bucket allows:
// burst + rate x elapsed.
func TestStormStaysWithinTheBucket(t *testing.T) { storm(t, singleRedis, nil) }

// TestStormWithRedisOutageStaysBounded stops Redis in the middle of the same storm until a
// replica has noticed: each replica falls back to its own bucket, so the bound grows by what
// each replica's fallback allows for its time there (a burst per spell plus the refill), and no
// more; every replica reports degraded, then healthy once Redis is back.
func TestStormWithRedisOutageStaysBounded(t *testing.T) {
	storm(t, singleRedis, func(t *testing.T, inst []*instance) {
		_ = rds.Stop()
		// Down until a replica has noticed and fallen back.
		for !inst[0].lim.Degraded() {
			inst[0].lim.Allow(context.Background(), "probe", "InvalidSpec", false)
		}
		if err := rds.Start(); err != nil {
			t.Error(err)
		}
	})
}

// TestStormThroughASentinelFailover runs the storm on a Sentinel group (a master, a replica,
// three sentinels) and kills the master in the middle: the sentinels promote the replica, the
// replicas' clients follow it, and the bound is the same as for an outage.
func TestStormThroughASentinelFailover(t *testing.T) {
	sg, err := testenv.StartRedisSentinel(1, 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sg.Close)
	before, err := sg.Master(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	storm(t, func(t testing.TB) redis.UniversalClient {
		return redisClient(t, redisx.Config{SentinelMaster: sg.Name, SentinelAddrs: sg.SentinelAddrs()})
	}, func(t *testing.T, inst []*instance) {
		_ = before.Stop()
	})
	after, err := sg.Master(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if after == before {
		t.Fatalf("the sentinels still name %s as master after it was killed", before.Addr)
	}
}

// TestStormThroughAClusterFailover runs the storm on a Redis Cluster of three masters, each with
// a replica, and kills the master serving the first object's slot in the middle: its replica
// takes the slots over, and the bound is the same as for an outage.
func TestStormThroughAClusterFailover(t *testing.T) {
	rc, err := testenv.StartRedisCluster(3, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Close)
	var killed *testenv.Redis
	var key string
	storm(t, func(t testing.TB) redis.UniversalClient {
		return redisClient(t, redisx.Config{ClusterAddrs: rc.Addrs()})
	}, func(t *testing.T, inst []*instance) {
		var err error
		key = inst[0].stormKey
		if killed, err = rc.MasterOf(context.Background(), key); err != nil {
			t.Error(err)
			return
		}
		_ = killed.Stop()
	})
	if killed == nil {
		t.Fatal("no master was killed")
	}
	after, err := rc.MasterOf(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if after == killed {
		t.Fatalf("%s still serves the killed master's slots", killed.Addr)
	}
}

// storm sends the failures through 4 replicas on clients from rdb; fault, if set, is injected
// once, a third of the way in, by replica 0's sender.
func storm(t *testing.T, rdb func(t testing.TB) redis.UniversalClient, fault func(t *testing.T, inst []*instance)) {
	const (
		replicas, objects, failures = 4, 50, 10000
		burst, perMin               = 5, 60
	)
	rate := float64(perMin) / 60
	prefix := fmt.Sprintf("storm:%d", time.Now().UnixNano())
	var inst []*instance
	for i := 0; i < replicas; i++ {
		inst = append(inst, startInstanceOn(t, fmt.Sprintf("replica-%d", i), Config{Enabled: true, QueueSize: 5000},
			limiter.Config{PerMinute: perMin, Burst: burst, Prefix: prefix}, rdb(t)))
	}
	ns := namespace(t)
	var runs []*agentsv1alpha1.AgentRun
	for i := 0; i < objects; i++ {
		runs = append(runs, agentRun(t, ns, fmt.Sprintf("storm-%02d", i)))
	}
	for _, in := range inst {
		in.stormKey = prefix + ":{" + string(runs[0].UID) + "}:full"
	}
	start := time.Now()
	var faulted atomic.Bool
	var sawDegraded atomic.Int32
	var wg sync.WaitGroup
	sent := make(chan int, failures)
	for r := 0; r < replicas; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := r; i < failures; i += replicas {
				run := runs[i%objects]
				_, degraded, err := inst[r].e.Emit(context.Background(), Event{
					Regarding: corev1.ObjectReference{APIVersion: agentsv1alpha1.GroupVersion.String(), Kind: "AgentRun", Namespace: ns, Name: run.Name, UID: run.UID},
					Type:      "Warning", Reason: "InvalidSpec", Note: fmt.Sprintf("attempt %d failed", i), Action: "CreateJob",
				})
				if err != nil {
					t.Error(err)
					return
				}
				if degraded {
					sawDegraded.Add(1)
				}
				sent <- i
				if fault != nil && r == 0 && i > failures/3 && !faulted.Swap(true) {
					fault(t, inst)
				}
				time.Sleep(time.Millisecond) // spread the storm over a few seconds
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if len(sent) != failures {
		t.Fatalf("sent %d of %d", len(sent), failures)
	}
	if fault != nil {
		if !faulted.Load() {
			t.Fatal("the fault was never injected")
		}
		for i, in := range inst {
			eventually(t, fmt.Sprintf("replica %d back on Redis", i), func() error {
				if in.lim.Degraded() {
					return fmt.Errorf("still degraded")
				}
				return nil
			})
			// What the replica now tells its callers.
			_, degraded, err := in.e.Emit(context.Background(), Event{
				Regarding: corev1.ObjectReference{APIVersion: agentsv1alpha1.GroupVersion.String(), Kind: "AgentRun", Namespace: ns, Name: runs[0].Name, UID: runs[0].UID},
				Type:      "Warning", Reason: "InvalidSpec", Note: "after the fault", Action: "CreateJob",
			})
			if err != nil || degraded {
				t.Errorf("replica %d after the fault: degraded=%v err=%v, want a healthy reply", i, degraded, err)
			}
		}
		if sawDegraded.Load() == 0 {
			t.Error("no reply during the storm said degraded")
		}
		sw, _ := inst[0].fallback(burst, rate)
		if len(sw) < 2 || !sw[0] || sw[len(sw)-1] {
			t.Errorf("replica 0 reported %v, want degraded then healthy", sw)
		}
	}
	// Wait for the writers to drain, then count.
	var counts map[string]int
	eventually(t, "writers drained", func() error {
		for i, in := range inst {
			if n := in.e.pending(); n != 0 {
				return fmt.Errorf("replica %d has %d events to write", i, n)
			}
		}
		return nil
	})
	counts = occurrences(t, ns)
	bound := float64(burst) + rate*elapsed.Seconds()
	for i, in := range inst {
		sw, allowance := in.fallback(burst, rate)
		if fault == nil && len(sw) > 0 {
			t.Errorf("replica %d fell back to in-process buckets with Redis up: %v", i, sw)
		}
		bound += allowance
	}
	total, max := 0, 0
	for _, run := range runs {
		n := counts[run.Name]
		total += n
		if n > max {
			max = n
		}
		if float64(n) > bound {
			t.Errorf("%s got %d events, more than the bound %.1f", run.Name, n, bound)
		}
		if n == 0 {
			t.Errorf("%s got no event at all", run.Name)
		}
	}
	t.Logf("%d failures over %s: %d events recorded, at most %d per object (bound %.1f; %d replies said degraded)",
		failures, elapsed.Round(time.Millisecond), total, max, bound, sawDegraded.Load())
}

// TestEventsAboutWatchedRunsReadNoRun: with the namespace's AgentRuns watched, redacting an
// event about a run reads the Secret names from the informer's cut-down copy (spec.secrets and
// secret volumes both survive the cut), so no event GETs its run; a run in a namespace not
// watched is still read, and redacted.
func TestEventsAboutWatchedRunsReadNoRun(t *testing.T) {
	watched, other := namespace(t), namespace(t)
	cfg, gets := testenv.CountObjectGets(env.Config, "agentruns", watched, other)
	lim, err := limiter.New(singleRedis(t), limiter.Config{PerMinute: 600, Burst: 100}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := NewMetrics(nil)
	e := New(kcs, dynamic.NewForConfigOrDie(cfg), lim, m, Config{Enabled: true, DefaultInstance: "watching"})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = e.Run(ctx) })
	wg.Go(func() { _ = e.WatchRuns(ctx, []string{watched}) })
	defer func() { cancel(); wg.Wait() }()
	srv := NewServer(e)

	const runs = 4
	secretValue := func(ns string, i int) string { return fmt.Sprintf("value-%s-%d-xyzzy", ns, i) }
	for _, ns := range []string{watched, other} {
		for i := range runs {
			name := fmt.Sprintf("s-%d", i)
			if err := kc.Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
				StringData: map[string]string{"token": secretValue(ns, i)}}); err != nil {
				t.Fatal(err)
			}
			run := &agentsv1alpha1.AgentRun{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("run-%d", i)},
				Spec:       agentsv1alpha1.AgentRunSpec{AgentRef: agentsv1alpha1.LocalRef{Name: "codex"}, Runtime: agentsv1alpha1.RuntimeSpec{Type: "job"}},
			}
			if i%2 == 0 {
				run.Spec.Secrets = []string{name}
			} else {
				run.Spec.Workload = &agentsv1alpha1.WorkloadSpec{Volumes: []agentsv1alpha1.WorkloadVolume{
					{Type: "secret", Name: "creds", MountPath: "/creds", SecretName: name}}}
			}
			if err := kc.Create(context.Background(), run); err != nil {
				t.Fatal(err)
			}
			if ns == watched {
				eventually(t, "the informer holds "+run.Name, func() error {
					if e.secrets.cachedRun(corev1.ObjectReference{Namespace: ns, Name: run.Name, UID: run.UID}) == nil {
						return fmt.Errorf("not yet")
					}
					return nil
				})
			}
			if _, err := srv.Emit(context.Background(), warning(run, "Forbidden", "push failed with "+secretValue(ns, i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, ns := range []string{watched, other} {
		eventually(t, "the events of "+ns, func() error {
			list, err := kcs.EventsV1().Events(ns).List(context.Background(), metav1.ListOptions{})
			if err != nil || len(list.Items) != runs {
				return fmt.Errorf("events: %v %d, want %d", err, len(list.Items), runs)
			}
			for _, ev := range list.Items {
				for i := range runs {
					if strings.Contains(ev.Note, secretValue(ns, i)) {
						t.Fatalf("secret value of s-%d reached %s's event: %q", i, ev.Regarding.Name, ev.Note)
					}
				}
			}
			return nil
		})
	}
	if n := gets[watched].Load(); n != 0 {
		t.Errorf("events about watched runs read %d AgentRuns from the API server, want none", n)
	}
	if n := gets[other].Load(); n < runs {
		t.Errorf("events about runs not watched read %d AgentRuns, want one per event (%d): is the test counting?", n, runs)
	}
}

// TestSecretValuesInEveryFormStayOutOfEvents (#31 item 9): a Secret's value (stored with the
// newline `echo` leaves) does not reach an event in any form a message carries it (as is, trimmed,
// base64, JSON-escaped), whether the run names it in spec.secrets or only in a workflow step's
// volume, and an event about an OrchestrationRun is redacted with its step runs' Secrets; in a
// watched namespace (from the informer) and elsewhere (read from the API server).
func TestSecretValuesInEveryFormStayOutOfEvents(t *testing.T) {
	watched, other := namespace(t), namespace(t)
	lim, err := limiter.New(singleRedis(t), limiter.Config{PerMinute: 600, Burst: 100}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := New(kcs, dynamic.NewForConfigOrDie(env.Config), lim, NewMetrics(nil), Config{Enabled: true, DefaultInstance: "forms"})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = e.Run(ctx) })
	wg.Go(func() { _ = e.WatchRuns(ctx, []string{watched}) })
	defer func() { cancel(); wg.Wait() }()
	srv := NewServer(e)

	stored := func(ns string) string { return "s3cr3t \"" + ns + "\" value\n" }
	forms := func(v string) []string {
		trimmed := strings.TrimRight(v, "\n")
		j, _ := json.Marshal(v)
		return []string{trimmed, base64.StdEncoding.EncodeToString([]byte(v)), base64.StdEncoding.EncodeToString([]byte(trimmed)), string(j[1 : len(j)-1])}
	}
	for _, ns := range []string{watched, other} {
		for _, name := range []string{"step-secret", "orch-secret"} {
			if err := kc.Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
				StringData: map[string]string{"token": name + "/" + stored(ns)}}); err != nil {
				t.Fatal(err)
			}
		}
		wf := &agentsv1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "wf"},
			Spec: agentsv1alpha1.AgentRunSpec{AgentRef: agentsv1alpha1.LocalRef{Name: "codex"}, Runtime: agentsv1alpha1.RuntimeSpec{Type: "workflow"},
				Workflow: &agentsv1alpha1.WorkflowSpec{Steps: []agentsv1alpha1.WorkflowStep{{Name: "a"}, {Name: "b",
					Workload: &agentsv1alpha1.WorkloadSpec{Volumes: []agentsv1alpha1.WorkloadVolume{{Type: "secret", Name: "c", MountPath: "/c", SecretName: "step-secret"}}}}}}}}
		step := &agentsv1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orch-plan", Labels: map[string]string{agentsv1alpha1.LabelOrchestrationRun: "orch"}},
			Spec: agentsv1alpha1.AgentRunSpec{AgentRef: agentsv1alpha1.LocalRef{Name: "codex"}, Runtime: agentsv1alpha1.RuntimeSpec{Type: "job"}, Secrets: []string{"orch-secret"}}}
		for _, r := range []*agentsv1alpha1.AgentRun{wf, step} {
			if err := kc.Create(context.Background(), r); err != nil {
				t.Fatal(err)
			}
		}
		if ns == watched {
			eventually(t, "the informer holds the runs", func() error {
				if steps, _ := e.secrets.cachedSteps(corev1.ObjectReference{Namespace: ns, Name: "orch"}); len(steps) != 1 ||
					e.secrets.cachedRun(corev1.ObjectReference{Namespace: ns, Name: "wf", UID: wf.UID}) == nil {
					return fmt.Errorf("not yet")
				}
				return nil
			})
		}
		for i, f := range forms("step-secret/" + stored(ns)) {
			if _, err := srv.Emit(context.Background(), warning(wf, []string{"ReconcileError", "Forbidden", "InvalidSpec", "MissingSecret"}[i], "step b failed: "+f)); err != nil {
				t.Fatal(err)
			}
		}
		orch := &pb.EventObject{ApiVersion: "orchestration.proompteng.ai/v1alpha1", Kind: "OrchestrationRun", Namespace: ns, Name: "orch", Uid: "orch-uid"}
		for i, f := range forms("orch-secret/" + stored(ns)) {
			if _, err := srv.Emit(context.Background(), &pb.EmitRequest{Object: orch, Type: "Warning", Reason: []string{"ReconcileError", "Forbidden", "InvalidSpec", "MissingSecret"}[i],
				Note: "step plan (AgentRun orch-plan) failed: " + f, Action: "Reconcile", ReportingController: "agentplane.proompteng.ai/run-controller"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, ns := range []string{watched, other} {
		eventually(t, "the events of "+ns, func() error {
			list, err := kcs.EventsV1().Events(ns).List(context.Background(), metav1.ListOptions{})
			if err != nil || len(list.Items) != 8 {
				return fmt.Errorf("events: %v %d, want 8", err, len(list.Items))
			}
			for _, ev := range list.Items {
				for _, secret := range []string{"step-secret/" + stored(ns), "orch-secret/" + stored(ns)} {
					for _, f := range forms(secret) {
						if strings.Contains(ev.Note, f) {
							t.Fatalf("%q (a form of a Secret's value) reached %s's event: %q", f, ev.Regarding.Name, ev.Note)
						}
					}
				}
				if !strings.Contains(ev.Note, "[REDACTED]") {
					t.Errorf("nothing redacted in %s's event: %q", ev.Regarding.Name, ev.Note)
				}
			}
			return nil
		})
	}
}
