package limiter

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Concurrent decisions share round trips to Redis. At most maxSenders round trips are in flight;
// a decision that arrives while they all are waits, and when one of them ends the decisions
// waiting by then go together, up to maxBatch EVALSHAs in one pipeline (each still its own
// atomic script call, on its own keys). A lone decision is one EVALSHA, as without the pipeline.
//
// No goroutine of its own: the first caller of a batch sends it (the round trip's slot passes to
// it), answers the others, and passes the slot on in turn.
const (
	// 32 keeps decisions interleaved with other Redis traffic as quick as one call each: fewer
	// senders batch more under a storm but make each decision wait longer when load is mixed
	// (docs/benchmarks.md, "Limiter: concurrent decisions pipelined").
	maxSenders = 32
	maxBatch   = 128
)

// call is one decision on its way to Redis.
type call struct {
	keys []string
	args []any
	n    int64
	err  error
	// wake is closed once: when the call is answered, or when it is handed a batch to send.
	wake chan struct{}
	// Guarded by pipe.mu: taken once the call is in a batch (it will be answered and may no
	// longer leave); batch is set on the batch's first call, which sends it.
	taken bool
	batch []*call
}

type pipe struct {
	mu       sync.Mutex
	inFlight int
	// pending is non-empty only while maxSenders round trips are in flight, so a new decision
	// never overtakes waiting ones.
	pending []*call
}

// decide runs the bucket script for keys and args, alone or in a batch with other decisions.
// It returns ctx's error, and the decision is never made, when ctx ends while it waits its turn.
func (l *Limiter) decide(ctx context.Context, keys []string, args []any) (int64, error) {
	p := &l.pipe
	p.mu.Lock()
	if p.inFlight < maxSenders {
		p.inFlight++
		p.mu.Unlock()
		n, err := script.Run(ctx, l.rdb, keys, args...).Int64()
		l.passOn()
		return n, err
	}
	c := &call{keys: keys, args: args, wake: make(chan struct{})}
	p.pending = append(p.pending, c)
	p.mu.Unlock()
	select {
	case <-c.wake:
	case <-ctx.Done():
		p.mu.Lock()
		if !c.taken {
			for i, w := range p.pending {
				if w == c {
					p.pending = append(p.pending[:i], p.pending[i+1:]...)
					break
				}
			}
			p.mu.Unlock()
			return 0, ctx.Err()
		}
		p.mu.Unlock()
		<-c.wake
	}
	if c.batch != nil {
		// The others in the batch wait on this round trip whatever becomes of this caller.
		l.send(context.WithoutCancel(ctx), c.batch)
		l.passOn()
	}
	return c.n, c.err
}

// passOn ends a round trip: its slot goes to the decisions waiting by now, if any.
func (l *Limiter) passOn() {
	p := &l.pipe
	p.mu.Lock()
	if len(p.pending) == 0 {
		p.inFlight--
		p.mu.Unlock()
		return
	}
	n := min(len(p.pending), maxBatch)
	batch := make([]*call, n)
	copy(batch, p.pending)
	p.pending = append(p.pending[:0], p.pending[n:]...)
	for _, c := range batch {
		c.taken = true
	}
	batch[0].batch = batch
	p.mu.Unlock()
	close(batch[0].wake)
}

// send makes batch's decisions in one round trip and answers each call but the first (whose
// caller is the sender). A call that finds the script gone (NOSCRIPT: Redis restarted or its
// scripts were flushed) is made again alone, which loads it.
func (l *Limiter) send(ctx context.Context, batch []*call) {
	pl := l.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(batch))
	for i, c := range batch {
		cmds[i] = pl.EvalSha(ctx, script.Hash(), c.keys, c.args...)
	}
	_, _ = pl.Exec(ctx) // each command carries its own error
	for i, c := range batch {
		c.n, c.err = cmds[i].Int64()
		if c.err != nil && redis.HasErrorPrefix(c.err, "NOSCRIPT") {
			c.n, c.err = script.Run(ctx, l.rdb, c.keys, c.args...).Int64()
		}
		if i > 0 {
			close(c.wake)
		}
	}
}
