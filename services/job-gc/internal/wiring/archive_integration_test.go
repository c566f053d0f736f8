//go:build integration

package wiring

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	orchv1alpha1 "github.com/agentplane/agentplane/libs/api/orchestration/v1alpha1"
	"github.com/agentplane/agentplane/libs/archive"
	"github.com/agentplane/agentplane/libs/config"
	"github.com/agentplane/agentplane/libs/kubeclient"
	"github.com/agentplane/agentplane/libs/testenv"
)

// One PostgreSQL for the package's archive tests, each on a database of its own.
var (
	pgOnce sync.Once
	pg     *testenv.Postgres
	pgErr  error
	pgDBs  int
)

func stopPostgres() {
	if pg != nil {
		_ = pg.Close()
	}
}

// archiveFor makes an empty database for the test and returns its config and a Store to read
// it back with.
func archiveFor(t testing.TB) (archive.Config, *archive.Store) {
	t.Helper()
	pgOnce.Do(func() { pg, pgErr = testenv.StartPostgres() })
	if pgErr != nil {
		t.Fatal(pgErr)
	}
	ctx := context.Background()
	pgDBs++
	db := fmt.Sprintf("gc_archive_%d", pgDBs)
	sql(t, pg.URL, "CREATE DATABASE "+db)
	c := archive.Config{URL: fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable", pg.User, pg.Addr, db), Password: pg.Password}
	s, err := archive.Open(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return c, s
}

// sql runs statements on the database at url and scans the first row into dest.
func sql(t testing.TB, url, statement string, dest ...any) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if len(dest) == 0 {
		_, err = conn.Exec(ctx, statement)
	} else {
		err = conn.QueryRow(ctx, statement).Scan(dest...)
	}
	if err != nil {
		t.Fatalf("%s: %v", statement, err)
	}
}

// dbOf is the database a test's archive config names.
func dbOf(c archive.Config) string {
	db := c.URL[strings.LastIndex(c.URL, "/")+1:]
	return db[:strings.Index(db, "?")]
}

func withArchive(c archive.Config) func(*Deps) {
	return func(d *Deps) { d.Archive = newLazyStore(c) }
}

// event records an Event about ar, as a controller would.
func (f *fixture) event(ar *agentsv1alpha1.AgentRun, reason, message string) {
	f.t.Helper()
	now := metav1.Now()
	_, err := env.Client.CoreV1().Events(f.ns).Create(context.Background(), &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: ar.Name + ".", Namespace: f.ns},
		InvolvedObject: corev1.ObjectReference{APIVersion: agentsv1alpha1.GroupVersion.String(), Kind: "AgentRun", Namespace: f.ns,
			Name: ar.Name, UID: ar.UID},
		Reason: reason, Message: message, Type: corev1.EventTypeNormal, Count: 1, FirstTimestamp: now, LastTimestamp: now,
		Source: corev1.EventSource{Component: "run-controller"},
	}, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) held(name string) (bool, error) {
	ar, err := f.getRun(name)
	if err != nil {
		return false, err
	}
	return slices.Contains(ar.Finalizers, agentsv1alpha1.FinalizerArchive), nil
}

// TestAFinishedRunIsArchivedBeforeItsRetentionDeletesIt: a run is held by the archive's finalizer
// from the start; once finished and past its retention it is gone from the cluster, and the
// archive has its final status, its Events (messages redacted), its Job's outcome, and its Job
// was held until then.
func TestAFinishedRunIsArchivedBeforeItsRetentionDeletesIt(t *testing.T) {
	c, store := archiveFor(t)
	f := startWith(t, defaults(), withArchive(c))
	ar := f.run("r", func(ar *agentsv1alpha1.AgentRun) { ar.Spec.TTLSecondsAfterFinished = ptr.To[int32](1) })
	j := f.job("r-job", ar, nil)
	testenv.Eventually(t, 20*time.Second, "the archive's finalizer on the run", func() error {
		if ok, err := f.held("r"); err != nil || !ok {
			return fmt.Errorf("held %v (%v)", ok, err)
		}
		return nil
	})
	f.event(ar, "Started", "the agent began with token ghp_abcdefghijklmnopqrstuvwxyz0123456789")
	f.finishJob("r-job")
	st := finished("Succeeded")
	st.JobRef = &agentsv1alpha1.JobRef{Name: "r-job", Namespace: f.ns, UID: string(j.UID)}
	f.setStatus(ar, st)
	testenv.Eventually(t, 30*time.Second, "the run and its Job deleted after its retention", func() error {
		if _, err := f.getRun("r"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("run still there (%v)", err)
		}
		return f.jobGone("r-job")
	})
	got, err := store.Get(context.Background(), string(ar.UID))
	if err != nil {
		t.Fatalf("the deleted run is not in the archive: %v", err)
	}
	var obj agentsv1alpha1.AgentRun
	if err := json.Unmarshal(got.Object, &obj); err != nil || obj.Status.Phase != "Succeeded" || obj.UID != ar.UID || obj.Status.JobRef == nil {
		t.Errorf("the archived object does not decode to the finished run: %v %s", err, got.Object)
	}
	if got.Phase != "Succeeded" || got.Agent != "a" || got.Kind != "AgentRun" {
		t.Errorf("archived %+v", got.Summary)
	}
	if len(got.Events) != 1 || got.Events[0].Reason != "Started" || strings.Contains(got.Events[0].Message, "ghp_") {
		t.Errorf("archived events %+v, want the one Started, its token redacted", got.Events)
	}
	if len(got.Jobs) != 1 || got.Jobs[0].Name != "r-job" || !got.Jobs[0].Succeeded {
		t.Errorf("archived jobs %+v, want r-job succeeded", got.Jobs)
	}
	if n := f.metric("agentplane_job_gc_archive_writes_total", "result", "ok"); n != 1 {
		t.Errorf("archive writes ok = %v, want 1", n)
	}
}

// TestADeletionByHandWaitsForTheArchive: with the database stopped, `kubectl delete` of a
// finished run leaves it deleting (held), the metrics say archiving is behind, and once the
// database is back the run is archived and gone.
func TestADeletionByHandWaitsForTheArchive(t *testing.T) {
	c, store := archiveFor(t)
	f := startWith(t, defaults(), withArchive(c)) // retention 1h: only the hand deletes
	ar := f.run("by-hand", nil)
	testenv.Eventually(t, 20*time.Second, "held", func() error {
		if ok, err := f.held("by-hand"); err != nil || !ok {
			return fmt.Errorf("held %v (%v)", ok, err)
		}
		return nil
	})
	if err := pg.Stop(); err != nil {
		t.Fatal(err)
	}
	restarted := false
	defer func() {
		if !restarted {
			_ = pg.Start()
		}
	}()
	f.setStatus(ar, finished("Failed"))
	if err := f.rc.Delete().Namespace(f.ns).Resource("agentruns").Name("by-hand").Do(context.Background()).Error(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "archiving reported behind", func() error {
		if n := f.metric("agentplane_job_gc_archive_pending_runs"); n != 1 {
			return fmt.Errorf("pending %v, want 1", n)
		}
		if n := f.metric("agentplane_job_gc_archive_writes_total", "result", "error"); n < 1 {
			return fmt.Errorf("failed writes %v, want at least 1", n)
		}
		return nil
	})
	if cur, err := f.getRun("by-hand"); err != nil || cur.DeletionTimestamp == nil {
		t.Fatalf("with the archive down the deleted run must wait, deleting: %v %+v", err, cur)
	}
	if err := pg.Start(); err != nil {
		t.Fatal(err)
	}
	restarted = true
	testenv.Eventually(t, 60*time.Second, "the run gone once the database is back", func() error {
		if _, err := f.getRun("by-hand"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%v)", err)
		}
		return nil
	})
	// The test's own pool may hold connections from before the restart: the first read may fail.
	testenv.Eventually(t, 10*time.Second, "the run archived, Failed", func() error {
		if got, err := store.Get(context.Background(), string(ar.UID)); err != nil || got.Phase != "Failed" {
			return fmt.Errorf("archived %+v %v", got.Summary, err)
		}
		return nil
	})
	if n := f.metric("agentplane_job_gc_archive_pending_runs"); n != 0 {
		t.Errorf("pending %v after catching up, want 0", n)
	}
}

// TestRetentionWithTheDatabaseStoppedMidwayArchivesEveryRunOnce (#37 item 4): 500 finished runs
// past their retention; the database is stopped once some are archived and started again a few
// seconds later. Every run is deleted in the end, none before it was archived, and the archive
// holds each exactly once.
func TestRetentionWithTheDatabaseStoppedMidwayArchivesEveryRunOnce(t *testing.T) {
	const n = 500
	c, store := archiveFor(t)
	cfg := defaults()
	cfg.Workers = 8
	f := startWith(t, cfg, withArchive(c))
	runs := make([]*agentsv1alpha1.AgentRun, n)
	testenv.Parallel(t, n, 16, func(i int) error {
		runs[i] = f.run(fmt.Sprintf("r-%03d", i), func(ar *agentsv1alpha1.AgentRun) { ar.Spec.TTLSecondsAfterFinished = ptr.To[int32](0) })
		return nil
	})
	testenv.Eventually(t, 60*time.Second, "every run held", func() error {
		for _, ar := range runs {
			if ok, err := f.held(ar.Name); err != nil || !ok {
				return fmt.Errorf("%s held %v (%v)", ar.Name, ok, err)
			}
		}
		return nil
	})
	testenv.Parallel(t, n, 16, func(i int) error {
		f.setStatus(runs[i], finished("Succeeded"))
		return nil
	})
	testenv.Eventually(t, 60*time.Second, "some runs archived", func() error {
		if w := f.metric("agentplane_job_gc_archive_writes_total", "result", "ok"); w < 50 {
			return fmt.Errorf("%v written", w)
		}
		return nil
	})
	if err := pg.Stop(); err != nil {
		t.Fatal(err)
	}
	stoppedAt := f.metric("agentplane_job_gc_archive_writes_total", "result", "ok")
	time.Sleep(3 * time.Second)
	left := 0
	for _, ar := range runs {
		if _, err := f.getRun(ar.Name); err == nil {
			left++
		}
	}
	if err := pg.Start(); err != nil {
		t.Fatal(err)
	}
	switch {
	case stoppedAt >= n:
		t.Fatalf("the database stopped too late to matter: all %v runs were written", stoppedAt)
	case float64(left) < n-stoppedAt-float64(cfg.Workers): // writes that landed as it stopped count late

		t.Fatalf("with the database down, %d runs are left in the cluster but only %v of %d were archived: runs were deleted unarchived", left, stoppedAt, n)
	}
	t.Logf("database stopped after %v writes; %d runs were waiting in the cluster", stoppedAt, left)
	testenv.Eventually(t, 3*time.Minute, "every run deleted", func() error {
		still := 0
		for _, ar := range runs {
			if _, err := f.getRun(ar.Name); err == nil {
				still++
			}
		}
		if still > 0 {
			return fmt.Errorf("%d runs left", still)
		}
		return nil
	})
	ctx := context.Background()
	var rows, distinct int
	sql(t, fmt.Sprintf("postgres://%s:%s@%s/%s?sslmode=disable", pg.User, pg.Password, pg.Addr, dbOf(c)),
		`SELECT count(*), count(DISTINCT uid) FROM runs`, &rows, &distinct)
	if rows != n || distinct != n {
		t.Fatalf("the archive holds %d rows of %d runs, want each of the %d once", rows, distinct, n)
	}
	testenv.Eventually(t, 10*time.Second, "every deleted run in the archive", func() error {
		for _, ar := range runs {
			if ok, err := store.Has(ctx, string(ar.UID)); err != nil || !ok {
				return fmt.Errorf("run %s (uid %s) was deleted but is not archived (%v)", ar.Name, ar.UID, err)
			}
		}
		return nil
	})
}

// TestAnArchivedRunIsLetGoAtOnceSoItsRetentionIsOneDeletion: a run held while it runs is
// released in the pass that archives it, long before its retention (an hour here), so that
// nothing is left for the end of its retention but the deletion: when it comes (job-gc's clock
// moved on) job-gc makes exactly one request, the DELETE.
func TestAnArchivedRunIsLetGoAtOnceSoItsRetentionIsOneDeletion(t *testing.T) {
	c, store := archiveFor(t)
	var requests, later atomic.Int64
	deletes := map[string]int{}
	var mu sync.Mutex
	f := startWith(t, defaults(), func(d *Deps) {
		withArchive(c)(d)
		d.Now = func() time.Time { return time.Now().Add(time.Duration(later.Load())) }
		d.REST = testenv.CountRequests(env.Config, &requests, func(r *http.Request) bool {
			if r.Method == http.MethodDelete {
				mu.Lock()
				deletes[r.URL.Path]++
				mu.Unlock()
			}
			return true
		})
		d.Kube = kubernetes.NewForConfigOrDie(d.REST)
	})
	ar := f.run("kept", nil)
	testenv.Eventually(t, 20*time.Second, "held while it runs", func() error {
		if ok, err := f.held("kept"); err != nil || !ok {
			return fmt.Errorf("held %v (%v)", ok, err)
		}
		return nil
	})
	f.setStatus(ar, finished("Succeeded"))
	testenv.Eventually(t, 20*time.Second, "archived and let go, still there", func() error {
		if ok, err := store.Has(context.Background(), string(ar.UID)); err != nil || !ok {
			return fmt.Errorf("archived %v (%v)", ok, err)
		}
		if ok, err := f.held("kept"); err != nil || ok {
			return fmt.Errorf("held %v (%v)", ok, err)
		}
		return nil
	})
	// Quiet: nothing more to do until the retention ends.
	before := requests.Load()
	time.Sleep(time.Second)
	if n := requests.Load() - before; n != 0 {
		t.Fatalf("job-gc made %d requests while the archived run waited for its retention", n)
	}
	// Its retention (an hour) ends: job-gc's clock moves two hours on, and a label the test
	// adds makes job-gc look at the run again.
	later.Store(int64(2 * time.Hour))
	before = requests.Load()
	if err := f.rc.Patch(types.MergePatchType).Namespace(f.ns).Resource("agentruns").Name("kept").
		Body([]byte(`{"metadata":{"labels":{"retention":"over"}}}`)).Do(context.Background()).Error(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "gone at the end of its retention", func() error {
		if _, err := f.getRun("kept"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%v)", err)
		}
		return nil
	})
	time.Sleep(500 * time.Millisecond) // what job-gc does on seeing it gone
	mu.Lock()
	defer mu.Unlock()
	if n := requests.Load() - before; n != 1 || len(deletes) != 1 {
		t.Errorf("the end of an archived run's retention took %d requests (deletes %v), want 1: the DELETE", n, deletes)
	}
}

// TestTurningArchivingOffReleasesTheFinalizer: runs held by an archiving job-gc are let go by one
// started with archiving off (what the chart's archive.enabled=false rolls out), so that nothing
// waits on an archive no one writes.
func TestTurningArchivingOffReleasesTheFinalizer(t *testing.T) {
	c, _ := archiveFor(t)
	f := startWith(t, defaults(), withArchive(c))
	f.run("kept", nil)
	testenv.Eventually(t, 20*time.Second, "held", func() error {
		if ok, err := f.held("kept"); err != nil || !ok {
			return fmt.Errorf("held %v (%v)", ok, err)
		}
		return nil
	})
	f.stop()
	f.runGC(defaults(), nil) // archiving off
	testenv.Eventually(t, 20*time.Second, "the finalizer released", func() error {
		if ok, err := f.held("kept"); err != nil || ok {
			return fmt.Errorf("held %v (%v)", ok, err)
		}
		return nil
	})
}

// TestAnOrchestrationRunIsArchivedWithItsStepsBeforeItGoes: at the end of its retention an
// OrchestrationRun goes with its step run, and the archive has both: the OrchestrationRun with
// its step tree (status.stepStatuses), the step run as a run of its own.
func TestAnOrchestrationRunIsArchivedWithItsStepsBeforeItGoes(t *testing.T) {
	c, store := archiveFor(t)
	f := startWith(t, defaults(), withArchive(c))
	orc, err := kubeclient.RESTClientFor(env.Config, orchv1alpha1.GroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	or := &orchv1alpha1.OrchestrationRun{TypeMeta: metav1.TypeMeta{APIVersion: orchv1alpha1.GroupVersion.String(), Kind: "OrchestrationRun"},
		ObjectMeta: metav1.ObjectMeta{Name: "or", Namespace: f.ns},
		Spec:       orchv1alpha1.OrchestrationRunSpec{OrchestrationRef: orchv1alpha1.NameRef{Name: "review"}, TTLSecondsAfterFinished: ptr.To[int32](1)}}
	if err := orc.Post().Namespace(f.ns).Resource("orchestrationruns").Body(or).Do(context.Background()).Into(or); err != nil {
		t.Fatal(err)
	}
	step := f.run("or-plan", func(ar *agentsv1alpha1.AgentRun) {
		ar.OwnerReferences = []metav1.OwnerReference{{APIVersion: orchv1alpha1.GroupVersion.String(), Kind: "OrchestrationRun",
			Name: "or", UID: or.UID, Controller: ptr.To(true)}}
	})
	f.setStatus(step, finished("Succeeded"))
	testenv.Eventually(t, 20*time.Second, "the OrchestrationRun finished", func() error {
		cur := &orchv1alpha1.OrchestrationRun{}
		if err := orc.Get().Namespace(f.ns).Resource("orchestrationruns").Name("or").Do(context.Background()).Into(cur); err != nil {
			return err
		}
		now := metav1.Now()
		cur.Status = orchv1alpha1.OrchestrationRunStatus{Phase: "Succeeded", FinishedAt: &now, ObservedGeneration: cur.Generation,
			StepStatuses: []orchv1alpha1.StepStatus{{Name: "plan", Phase: "Succeeded"}}}
		return orc.Put().Namespace(f.ns).Resource("orchestrationruns").Name("or").SubResource("status").Body(cur).Do(context.Background()).Error()
	})
	testenv.Eventually(t, 30*time.Second, "the OrchestrationRun and its step run gone", func() error {
		if err := orc.Get().Namespace(f.ns).Resource("orchestrationruns").Name("or").Do(context.Background()).Error(); !apierrors.IsNotFound(err) {
			return fmt.Errorf("OrchestrationRun still there (%v)", err)
		}
		if _, err := f.getRun("or-plan"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("step run still there (%v)", err)
		}
		return nil
	})
	got, err := store.Get(context.Background(), string(or.UID))
	if err != nil {
		t.Fatalf("the OrchestrationRun is not archived: %v", err)
	}
	var obj orchv1alpha1.OrchestrationRun
	if err := json.Unmarshal(got.Object, &obj); err != nil || got.Kind != "OrchestrationRun" || got.Agent != "review" ||
		len(obj.Status.StepStatuses) != 1 || obj.Status.StepStatuses[0].Name != "plan" {
		t.Errorf("archived %+v, its object %s (%v): want its step tree", got.Summary, got.Object, err)
	}
	if s, err := store.Get(context.Background(), string(step.UID)); err != nil || s.Kind != "AgentRun" || s.Phase != "Succeeded" {
		t.Errorf("the step run archived: %+v %v", s.Summary, err)
	}
}

// TestArchivedRunsPastTheArchivesRetentionAreDeleted: with JANGAR_ARCHIVE_RETENTION_SECONDS set,
// job-gc deletes the archived rows of its namespaces' runs that finished longer ago than that,
// in batches (more rows than one batch), and keeps the newer ones and other namespaces' rows.
func TestArchivedRunsPastTheArchivesRetentionAreDeleted(t *testing.T) {
	c, s := archiveFor(t)
	ctx := context.Background()
	now := time.Now()
	put := func(uid, ns string, finished time.Time) {
		t.Helper()
		if err := s.Put(ctx, archive.Record{Summary: archive.Summary{UID: uid, Kind: "AgentRun", Namespace: ns, Name: uid, Phase: "Succeeded",
			CreatedAt: finished.Add(-time.Minute), FinishedAt: finished}, Object: json.RawMessage(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := defaults()
	cfg.ArchiveRetention, cfg.ArchivePruneEvery = 24*time.Hour, 200*time.Millisecond
	f := startWith(t, cfg, withArchive(c))
	const old = pruneBatch + 150
	for i := range old {
		put(fmt.Sprintf("old-%04d", i), f.ns, now.Add(-48*time.Hour-time.Duration(i)*time.Second))
	}
	put("recent", f.ns, now.Add(-time.Hour))
	put("elsewhere-old", "another-install", now.Add(-72*time.Hour))
	count := func() (mine, others int) {
		sql(t, fmt.Sprintf("postgres://%s:%s@%s/%s?sslmode=disable", pg.User, pg.Password, pg.Addr, dbOf(c)),
			fmt.Sprintf("SELECT count(*) FILTER (WHERE namespace = '%s'), count(*) FILTER (WHERE namespace <> '%s') FROM runs", f.ns, f.ns), &mine, &others)
		return mine, others
	}
	testenv.Eventually(t, 60*time.Second, "the old rows of the namespace deleted", func() error {
		if mine, others := count(); mine != 1 || others != 1 {
			return fmt.Errorf("%d rows of %s left (want 1: the recent one), %d of other namespaces (want 1)", mine, f.ns, others)
		}
		return nil
	})
	if _, err := s.Get(ctx, "recent"); err != nil {
		t.Errorf("the recent row: %v", err)
	}
}

// TestAReleaseWhileJobGCRunsStands: helm uninstall runs `job-gc release-holds` (the pre-delete
// hook) while job-gc still runs; job-gc must not hold again the runs the hook let go of, or they
// would wait on an archive no one writes once job-gc is gone. A run so released is still archived
// when it finishes.
func TestAReleaseWhileJobGCRunsStands(t *testing.T) {
	c, store := archiveFor(t)
	f := startWith(t, defaults(), withArchive(c))
	ctx := context.Background()
	ar := f.run("released", nil)
	testenv.Eventually(t, 20*time.Second, "held", func() error {
		if ok, err := f.held("released"); err != nil || !ok {
			return fmt.Errorf("held %v (%v)", ok, err)
		}
		return nil
	})
	var out, errOut strings.Builder
	if code := ReleaseHolds(ctx, config.FromMap(map[string]string{"KUBECONFIG": env.Kubeconfig, "JANGAR_AGENTS_CONTROLLER_NAMESPACES": f.ns}), &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s%s", code, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), "released agentrun/released -n "+f.ns+" (archive)") {
		t.Fatalf("release-holds did not release the run:\n%s", out.String())
	}
	// Time for job-gc to see the release (its informer) and, were it to, hold the run again.
	time.Sleep(2 * time.Second)
	if ok, err := f.held("released"); err != nil || ok {
		t.Fatalf("job-gc held again a run release-holds let go of (held %v, %v)", ok, err)
	}
	f.setStatus(ar, finished("Succeeded"))
	testenv.Eventually(t, 20*time.Second, "archived when it finished", func() error {
		if ok, err := store.Has(ctx, string(ar.UID)); err != nil || !ok {
			return fmt.Errorf("archived %v (%v)", ok, err)
		}
		return nil
	})
}

// TestReleaseHoldsFreesJobsAndArchiveHolds: `job-gc release-holds` (the chart's uninstall hook)
// releases, once job-gc is gone, the job-result hold of every Job and the archive's finalizer of
// every AgentRun and OrchestrationRun of its namespaces, saying what it released; the runs can
// then be deleted.
func TestReleaseHoldsFreesJobsAndArchiveHolds(t *testing.T) {
	c, _ := archiveFor(t)
	f := startWith(t, defaults(), withArchive(c))
	ctx := context.Background()
	orc, err := kubeclient.RESTClientFor(env.Config, orchv1alpha1.GroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	or := &orchv1alpha1.OrchestrationRun{TypeMeta: metav1.TypeMeta{APIVersion: orchv1alpha1.GroupVersion.String(), Kind: "OrchestrationRun"},
		ObjectMeta: metav1.ObjectMeta{Name: "or", Namespace: f.ns},
		Spec:       orchv1alpha1.OrchestrationRunSpec{OrchestrationRef: orchv1alpha1.NameRef{Name: "review"}}}
	if err := orc.Post().Namespace(f.ns).Resource("orchestrationruns").Body(or).Do(ctx).Into(or); err != nil {
		t.Fatal(err)
	}
	a, b := f.run("a", nil), f.run("b", nil)
	f.job("a-job", a, nil)
	testenv.Eventually(t, 20*time.Second, "every run held by the archive's finalizer", func() error {
		for _, name := range []string{"a", "b"} {
			if held, err := f.held(name); err != nil || !held { //nolint:contextcheck // the fixture reads with its own background context
				return fmt.Errorf("run %s not held (%v)", name, err)
			}
		}
		cur := &orchv1alpha1.OrchestrationRun{}
		if err := orc.Get().Namespace(f.ns).Resource("orchestrationruns").Name("or").Do(ctx).Into(cur); err != nil || !slices.Contains(cur.Finalizers, agentsv1alpha1.FinalizerArchive) {
			return fmt.Errorf("the OrchestrationRun not held (%v): %v", err, cur.Finalizers)
		}
		return nil
	})
	f.stop() // job-gc gone, as after helm uninstall
	var out, errOut strings.Builder
	code := ReleaseHolds(ctx, config.FromMap(map[string]string{"KUBECONFIG": env.Kubeconfig, "JANGAR_AGENTS_CONTROLLER_NAMESPACES": f.ns}), &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s%s", code, out.String(), errOut.String())
	}
	for _, want := range []string{"released job/a-job -n " + f.ns, "released agentrun/a -n " + f.ns + " (archive)", "released agentrun/b -n " + f.ns + " (archive)",
		"released orchestrationrun/or -n " + f.ns + " (archive)", "1 job-result hold(s) and 3 archive finalizer(s) released"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if err := f.rc.Delete().Namespace(f.ns).Resource("agentruns").Name(b.Name).Do(ctx).Error(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the released run deleted at once", func() error {
		if _, err := f.getRun("b"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("run b: %v", err)
		}
		return nil
	})
}
