package cancel

import "k8s.io/apimachinery/pkg/types"

// What the protocol keeps of the runs' children between passes, under the one lock: the Jobs and
// pods this process stopped (its caches may not show it yet) and each cancelled AgentRun's Jobs.

// Done reports whether this process wrote the run with uid Cancelled (the cache may lag).
func (p *Protocol) Done(uid types.UID) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done[uid]
}

// Forget drops what this process kept about the run with uid: it was deleted.
func (p *Protocol) Forget(uid types.UID) {
	p.mu.Lock()
	p.dropLocked(uid)
	delete(p.done, uid)
	p.mu.Unlock()
}

// RunOfJob is the queue key (Key) of the cancelled run whose Job has uid, also once the Job is
// gone; false when no cancel in progress knows the Job.
func (p *Protocol) RunOfJob(uid types.UID) (string, bool) {
	p.mu.Lock()
	k, ok := p.jobRun[uid]
	p.mu.Unlock()
	return k, ok
}

// MarkJob remembers that this process deletes the Job with uid, and reports whether it already
// had (ForgetJob undoes it).
func (p *Protocol) MarkJob(uid types.UID) bool {
	p.mu.Lock()
	hit := p.jobsHit[uid]
	p.jobsHit[uid] = true
	p.mu.Unlock()
	return hit
}

// JobHit reports whether this process deleted the Job with uid and has not seen it gone yet.
func (p *Protocol) JobHit(uid types.UID) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.jobsHit[uid]
}

// ForgetJob forgets that this process deleted the Job with uid (it is gone, or was not deleted).
func (p *Protocol) ForgetJob(uid types.UID) {
	p.mu.Lock()
	delete(p.jobsHit, uid)
	p.mu.Unlock()
}

// MarkPod remembers that this process asked to delete the pod with uid, and reports whether it
// already had (ForgetPod undoes it).
func (p *Protocol) MarkPod(uid types.UID) bool {
	p.mu.Lock()
	hit := p.podsHit[uid]
	p.podsHit[uid] = true
	p.mu.Unlock()
	return hit
}

// ForgetPod forgets that this process asked to delete the pod with uid: it is gone.
func (p *Protocol) ForgetPod(uid types.UID) {
	p.mu.Lock()
	delete(p.podsHit, uid)
	p.mu.Unlock()
}

// JobSet is one cancelled AgentRun's Jobs, names by UID: their pods are found through them once
// a Job is gone. Finish and Forget drop it.
type JobSet struct {
	p    *Protocol
	uids map[types.UID]string
}

// JobsOf is the JobSet of the AgentRun with uid run, made on first use.
func (p *Protocol) JobsOf(run types.UID) JobSet {
	p.mu.Lock()
	defer p.mu.Unlock()
	uids := p.jobUIDs[run]
	if uids == nil {
		uids = map[types.UID]string{}
		p.jobUIDs[run] = uids
	}
	return JobSet{p: p, uids: uids}
}

// Remember adds the Job with uid and name to the set, and maps it to k, the run's queue key
// (RunOfJob).
func (s JobSet) Remember(k string, uid types.UID, name string) {
	s.p.mu.Lock()
	s.uids[uid] = name
	s.p.jobRun[uid] = k
	s.p.mu.Unlock()
}

// All is a copy of the set.
func (s JobSet) All() map[types.UID]string {
	s.p.mu.Lock()
	defer s.p.mu.Unlock()
	all := make(map[types.UID]string, len(s.uids))
	for k, v := range s.uids {
		all[k] = v
	}
	return all
}
