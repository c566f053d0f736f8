package agentrun

import (
	"fmt"
	"sort"
	"sync"
	"time"

	agentsv1alpha1 "github.com/agentplane/agentplane/libs/api/agents/v1alpha1"
	"github.com/agentplane/agentplane/libs/reasons"
	"github.com/agentplane/agentplane/services/run-controller/internal/core"
)

// Status reasons of admission (libs/reasons).
const (
	ReasonQueued    = reasons.Queued
	ReasonQueueFull = reasons.QueueFull
)

// scopes are what a run counts against: its namespace, its Agent and its repository.
type scopes struct{ ns, agent, repo string }

func scopesOf(ar *agentsv1alpha1.AgentRun) scopes {
	return scopes{ns: ar.Namespace, agent: core.NsKey(ar.Namespace, ar.Spec.AgentRef.Name), repo: repoOf(ar)}
}

// repoOf is the repository a run works on: parameters.repository (or repo), else the name of
// its vcsRef. Runs with none count against no repository limit.
func repoOf(ar *agentsv1alpha1.AgentRun) string {
	for _, k := range []string{"repository", "repo"} {
		if v := ar.Spec.Parameters[k]; v != "" {
			return v
		}
	}
	if ar.Spec.VcsRef != nil {
		return core.NsKey(ar.Namespace, ar.Spec.VcsRef.Name)
	}
	return ""
}

type startRecord struct {
	at time.Time
	s  scopes
}

// decision is what admission says about a run that has not started.
type decision struct {
	start, refuse   bool
	reason, message string
	retryAfter      time.Duration
}

// admission applies the concurrency, queue and start-rate limits. The controller acts on one
// replica at a time (leader election), so the counts live here, rebuilt from the cache at start.
// Runs start in creation order: a run may take a slot only when the runs created before it
// that have not started yet leave one free in each of its scopes.
type admission struct {
	l          core.Limits
	notStarted func() []*agentsv1alpha1.AgentRun

	mu     sync.Mutex
	active map[string]scopes
	starts []startRecord
	// held are runs that cannot start for another reason (a bad spec, a missing Agent or
	// Secret, a full queue): they do not hold up the runs behind them.
	held map[string]bool
}

func newAdmission(l core.Limits, notStarted func() []*agentsv1alpha1.AgentRun) *admission {
	return &admission{l: l, notStarted: notStarted, active: map[string]scopes{}, held: map[string]bool{}}
}

// seed counts the runs that already started and have not finished.
func (a *admission) seed(runs []*agentsv1alpha1.AgentRun) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, ar := range runs {
		if !core.IsTerminal(ar.Status.Phase) && hasStarted(ar) {
			a.active[core.NsKey(ar.Namespace, ar.Name)] = scopesOf(ar)
		}
	}
}

// hasStarted reports whether a run's first Job is recorded in its status, or its start was
// claimed (reason Starting: the Job may exist before its jobRef is written).
func hasStarted(ar *agentsv1alpha1.AgentRun) bool {
	if ar.Status.JobRef != nil || ar.Status.Reason == reasons.Starting {
		return true
	}
	if ar.Status.Workflow != nil {
		for _, s := range ar.Status.Workflow.Steps {
			if s.JobRef != nil {
				return true
			}
		}
	}
	return false
}

// admit decides whether the run may create its first Job now. A run that may is counted as
// active at once, so that the next decision sees it.
func (a *admission) admit(ar *agentsv1alpha1.AgentRun, now time.Time) decision {
	key := core.NsKey(ar.Namespace, ar.Name)
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.held, key)
	if _, ok := a.active[key]; ok {
		return decision{start: true}
	}
	s := scopesOf(ar)
	if !a.l.Any() {
		a.active[key] = s
		return decision{start: true}
	}
	a.pruneStarts(now)
	older := a.olderWaiting(ar, key)
	// free is how many of the runs created before this one can start now: the fewest slots
	// left in any of its limited scopes. Those runs are not waiting, so they do not count
	// against the queue limits.
	wait, free := a.concurrencyWait(s, older)
	rateWait, rateFree := a.rateWait(s, older, now)
	free = min(free, rateFree)
	if wait == nil {
		wait = rateWait
	}
	if wait == nil {
		a.active[key] = s
		a.starts = append(a.starts, startRecord{at: now, s: s})
		return decision{start: true}
	}
	if refused := a.queueFull(s, older, free); refused != nil {
		a.held[key] = true
		return *refused
	}
	return *wait
}

// limitScope is one limit a run counts against: the cluster's, its namespace's, its Agent's or
// its repository's.
type limitScope struct {
	kind, name, env string
	limit           int
	match           func(scopes) bool
}

// scopesFor are the run's scopes for the three limits of one family (concurrency, rate, queue),
// cluster first; the last is its Agent (concurrency) or its repository (rate, queue).
func scopesFor(s scopes, envs [3]string, limits [3]int, lastIsAgent bool) []limitScope {
	out := []limitScope{
		{"cluster", "the cluster", envs[0], limits[0], func(scopes) bool { return true }},
		{"namespace", "namespace " + s.ns, envs[1], limits[1], func(o scopes) bool { return o.ns == s.ns }},
	}
	if lastIsAgent {
		return append(out, limitScope{"agent", "agent " + s.agent, envs[2], limits[2], func(o scopes) bool { return o.agent == s.agent }})
	}
	if s.repo == "" { // a run with no repository counts against no repository limit
		return out
	}
	return append(out, limitScope{"repo", "repository " + s.repo, envs[2], limits[2], func(o scopes) bool { return o.repo == s.repo }})
}

// pruneStarts forgets starts older than the rate window.
func (a *admission) pruneStarts(now time.Time) {
	window := now.Add(-a.l.RateWindow)
	kept := a.starts[:0]
	for _, st := range a.starts {
		if st.at.After(window) {
			kept = append(kept, st)
		}
	}
	a.starts = kept
}

// olderWaiting are the scopes of the runs created before ar that have not started and are not
// held: they go first.
func (a *admission) olderWaiting(ar *agentsv1alpha1.AgentRun, key string) []scopes {
	var older []scopes
	for _, o := range a.notStarted() {
		ok := core.NsKey(o.Namespace, o.Name)
		if ok == key || a.held[ok] {
			continue
		}
		if _, act := a.active[ok]; act {
			continue
		}
		if createdBefore(o, ar) {
			older = append(older, scopesOf(o))
		}
	}
	return older
}

func count(of []scopes, match func(scopes) bool) int {
	n := 0
	for _, o := range of {
		if match(o) {
			n++
		}
	}
	return n
}

// concurrencyWait is the wait for a concurrency slot (nil: none), and the fewest slots left in
// any concurrency scope.
func (a *admission) concurrencyWait(s scopes, older []scopes) (*decision, int) {
	var wait *decision
	free := int(^uint(0) >> 1)
	active := make([]scopes, 0, len(a.active))
	for _, o := range a.active {
		active = append(active, o)
	}
	for _, sc := range scopesFor(s, [3]string{core.EnvConcCluster, core.EnvConcNS, core.EnvConcAgent},
		[3]int{a.l.ConcurrencyCluster, a.l.ConcurrencyNamespace, a.l.ConcurrencyAgent}, true) {
		if sc.limit <= 0 {
			continue
		}
		running := count(active, sc.match)
		free = min(free, max(0, sc.limit-running))
		ahead := count(older, sc.match)
		if wait == nil && running+ahead >= sc.limit {
			wait = &decision{reason: ReasonQueued, retryAfter: 30 * time.Second, message: fmt.Sprintf(
				"waiting for a slot: %s runs %d of %d at once (%s=%d), %d created earlier still waiting",
				sc.name, running, sc.limit, sc.env, sc.limit, ahead)}
		}
	}
	return wait, free
}

// rateWait is the wait for the start rate (nil: none), and the fewest starts left in any rate
// scope's window.
func (a *admission) rateWait(s scopes, older []scopes, now time.Time) (*decision, int) {
	var wait *decision
	free := int(^uint(0) >> 1)
	for _, sc := range scopesFor(s, [3]string{core.EnvRateCluster, core.EnvRateNS, core.EnvRateRepo},
		[3]int{a.l.RateCluster, a.l.RateNamespace, a.l.RateRepo}, false) {
		if sc.limit <= 0 {
			continue
		}
		var first time.Time
		n := 0
		for _, st := range a.starts {
			if sc.match(st.s) {
				if n == 0 {
					first = st.at
				}
				n++
			}
		}
		free = min(free, max(0, sc.limit-n))
		ahead := count(older, sc.match)
		if wait == nil && n+ahead >= sc.limit {
			after := time.Second
			if n > 0 {
				after = max(first.Add(a.l.RateWindow).Sub(now), 100*time.Millisecond)
			}
			wait = &decision{reason: ReasonQueued, retryAfter: after, message: fmt.Sprintf(
				"waiting for the start rate: %s started %d runs in the last %s (%s=%d per %s=%d)",
				sc.name, n, a.l.RateWindow, sc.env, sc.limit, core.EnvRateWindow, int(a.l.RateWindow.Seconds()))}
		}
	}
	return wait, free
}

// queueFull is the refusal of a run that would wait behind a full queue (nil: room).
func (a *admission) queueFull(s scopes, older []scopes, free int) *decision {
	for _, sc := range scopesFor(s, [3]string{core.EnvQueueCluster, core.EnvQueueNS, core.EnvQueueRepo},
		[3]int{a.l.QueueCluster, a.l.QueueNamespace, a.l.QueueRepo}, false) {
		if sc.limit <= 0 {
			continue
		}
		if ahead := max(0, count(older, sc.match)-free); ahead >= sc.limit {
			return &decision{refuse: true, reason: ReasonQueueFull, message: fmt.Sprintf(
				"refused: %d runs already wait in %s's queue (%s=%d); create the run again once some have started",
				ahead, sc.name, sc.env, sc.limit)}
		}
	}
	return nil
}

// markActive counts a run whose Job exists as running, even before its status says so (a Job
// created just before a restart whose jobRef was not yet written).
func (a *admission) markActive(ar *agentsv1alpha1.AgentRun) {
	key := core.NsKey(ar.Namespace, ar.Name)
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.active[key]; !ok {
		a.active[key] = scopesOf(ar)
		delete(a.held, key)
	}
}

// hold marks a run that waits for another reason, so that it does not hold up younger runs.
func (a *admission) hold(key string) {
	a.mu.Lock()
	a.held[key] = true
	a.mu.Unlock()
}

// unstart undoes admit for a run whose Job could not be created.
func (a *admission) unstart(key string) {
	a.mu.Lock()
	delete(a.active, key)
	a.mu.Unlock()
}

// release forgets a finished or deleted run; it reports whether a slot was freed.
func (a *admission) release(key string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.held, key)
	if _, ok := a.active[key]; ok {
		delete(a.active, key)
		return true
	}
	return false
}

// activeCount is the number of runs counted as running.
func (a *admission) activeCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.active)
}

func createdBefore(a, b *agentsv1alpha1.AgentRun) bool {
	ta, tb := a.CreationTimestamp.Time, b.CreationTimestamp.Time
	if !ta.Equal(tb) {
		return ta.Before(tb)
	}
	if a.Namespace != b.Namespace {
		return a.Namespace < b.Namespace
	}
	return a.Name < b.Name
}

// notStartedRuns lists, from the cache, the runs that have not started and are not finished.
func (c *Reconciler) notStartedRuns() []*agentsv1alpha1.AgentRun {
	var out []*agentsv1alpha1.AgentRun
	for _, ar := range c.AllRuns() {
		if !core.IsTerminal(ar.Status.Phase) && !hasStarted(ar) && ar.DeletionTimestamp == nil {
			out = append(out, ar)
		}
	}
	return out
}

// wakeQueued re-examines the oldest waiting runs after a slot frees.
func (c *Reconciler) wakeQueued() {
	if !c.Cfg.Limits.Any() {
		return
	}
	waiting := c.notStartedRuns()
	sort.Slice(waiting, func(i, j int) bool { return createdBefore(waiting[i], waiting[j]) })
	for i, ar := range waiting {
		if i == 32 {
			break
		}
		c.enqueue(core.NsKey(ar.Namespace, ar.Name))
	}
}
