package wiring

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/agentplane/agentplane/libs/archive"
	"github.com/agentplane/agentplane/libs/controller"
	"github.com/agentplane/agentplane/services/job-gc/internal/archiver"
	"github.com/agentplane/agentplane/services/job-gc/internal/job"
)

// lazyStore is the archive, opened (and migrated) on first use and again after a failed open:
// job-gc starts (and guards Job results) while the database is unreachable; archiving, and the
// retention that waits on it, resume once it answers.
type lazyStore struct{ *archive.Lazy }

func newLazyStore(c archive.Config) *lazyStore { return &lazyStore{archive.NewLazy(c, archive.Open)} }

func (l *lazyStore) Put(ctx context.Context, r archive.Record) error {
	s, err := l.Store(ctx)
	if err != nil {
		return err
	}
	return s.Put(ctx, r)
}

func (l *lazyStore) Has(ctx context.Context, uid string) (bool, error) {
	s, err := l.Store(ctx)
	if err != nil {
		return false, err
	}
	return s.Has(ctx, uid)
}

func (l *lazyStore) DeleteFinishedBefore(ctx context.Context, cutoff time.Time, batch int, namespaces ...string) (int64, error) {
	s, err := l.Store(ctx)
	if err != nil {
		return 0, err
	}
	return s.DeleteFinishedBefore(ctx, cutoff, batch, namespaces...)
}

// newArchiver is the archive writer of g: once a run is archived, its Jobs are looked at again
// (their job-result holds waited for it).
func newArchiver(g *GC, cfg Config, d Deps) *archiver.Archiver {
	return &archiver.Archiver{Store: d.Archive, Kube: d.Kube, Client: g.client, Jobs: g.jobs, ByRun: job.ByRun, Events: map[string][]cache.SharedIndexInformer{},
		LogLines: int64(cfg.ArchiveLogLines), Now: d.Now,
		Archived: func(kind, ns, name string) {
			if kind != "AgentRun" {
				return
			}
			for _, j := range controller.ByIndex[*batchv1.Job](g.jobs[ns], job.ByRun, ns+"/"+name) {
				g.jobQ.Add(j.Namespace + "/" + j.Name)
			}
		},
		Writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agentplane_job_gc_archive_writes_total", Help: "Runs written to the run archive, by result (ok, error: the database unreachable or refusing; the run waits and is retried).",
		}, []string{"result"}),
		Seconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "agentplane_job_gc_archive_write_seconds", Help: "Time to capture one finished run (its Events, Jobs and log tails) and write it to the run archive.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
		}),
	}
}

func registerArchiveMetrics(r prometheus.Registerer, a *archiver.Archiver, p *archivePruner, retention time.Duration) {
	a.Writes.WithLabelValues("ok")
	a.Writes.WithLabelValues("error")
	if p != nil {
		r.MustRegister(p.deleted, p.failures)
	}
	r.MustRegister(a.Writes, a.Seconds,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "agentplane_job_gc_archive_retention_seconds", Help: "How long an archived run is kept from when it finished (JANGAR_ARCHIVE_RETENTION_SECONDS; 0: kept).",
		}, func() float64 { return retention.Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "agentplane_job_gc_archive_pending_runs", Help: "Finished runs not yet in the run archive (their retention and their Jobs' release wait for it).",
		}, func() float64 { n, _ := a.Behind(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "agentplane_job_gc_archive_oldest_pending_seconds", Help: "How long the longest-waiting finished run has waited for the run archive (0 when none waits).",
		}, func() float64 { _, d := a.Behind(); return d.Seconds() }),
	)
}
