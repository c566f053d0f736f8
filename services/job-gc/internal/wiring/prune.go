package wiring

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentplane/agentplane/libs/logging"
)

// pruner deletes archived runs past the archive's retention (an *archive.Store).
type pruner interface {
	DeleteFinishedBefore(ctx context.Context, cutoff time.Time, batch int, namespaces ...string) (int64, error)
}

// pruneBatch bounds one DELETE: a large backlog goes in many short statements, not one that holds
// locks on a million rows.
const pruneBatch = 1000

// archivePruner is the archive's own retention: every interval, the rows of runs of job-gc's
// namespaces that finished more than retention ago are deleted, pruneBatch at a time.
type archivePruner struct {
	store      pruner
	retention  time.Duration
	every      time.Duration
	namespaces []string // nil: every namespace (job-gc watches them all)
	now        func() time.Time

	deleted  prometheus.Counter
	failures prometheus.Counter
}

func newArchivePruner(p pruner, cfg Config, now func() time.Time) *archivePruner {
	every := cfg.ArchivePruneEvery
	if every <= 0 {
		every = DefaultArchivePruneEvery
	}
	var ns []string
	for _, n := range cfg.Namespaces {
		if n == "" { // all namespaces
			ns = nil
			break
		}
		ns = append(ns, n)
	}
	return &archivePruner{store: p, retention: cfg.ArchiveRetention, every: every, namespaces: ns, now: now,
		deleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentplane_job_gc_archive_pruned_total", Help: "Archived runs deleted from the run archive at the end of its retention (JANGAR_ARCHIVE_RETENTION_SECONDS).",
		}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "agentplane_job_gc_archive_prune_failures_total", Help: "Passes of the run archive's retention that stopped on a database error (the next pass, an interval later, goes on).",
		}),
	}
}

// run prunes at once and then every interval until ctx ends.
func (p *archivePruner) run(ctx context.Context) {
	t := time.NewTicker(p.every)
	defer t.Stop()
	for {
		p.once(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// once deletes every row past the retention, in batches; a failed batch ends the pass (the rows
// stay, and the next pass tries again).
func (p *archivePruner) once(ctx context.Context) int64 {
	cutoff := p.now().Add(-p.retention)
	var total int64
	for ctx.Err() == nil {
		n, err := p.store.DeleteFinishedBefore(ctx, cutoff, pruneBatch, p.namespaces...)
		total += n
		p.deleted.Add(float64(n))
		if err != nil {
			if ctx.Err() == nil {
				p.failures.Inc()
				logging.FromContext(ctx).Warn("the run archive's retention stopped; it tries again later", "err", err, "deleted", total, "retry", p.every)
			}
			break
		}
		if n < pruneBatch {
			break
		}
	}
	if total > 0 {
		logging.FromContext(ctx).Info("archived runs past the archive's retention deleted", "deleted", total, "finishedBefore", cutoff)
	}
	return total
}
