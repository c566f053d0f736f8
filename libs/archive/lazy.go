package archive

import (
	"context"
	"sync"
)

// Lazy opens the archive on first use, and again after a failed open, so a service starts (and
// does what needs no archive) while the database is unreachable. job-gc opens it with Open (it
// migrates), watch-gateway with OpenReader.
type Lazy struct {
	open func(context.Context, Config) (*Store, error)
	cfg  Config

	mu    sync.Mutex
	store *Store
}

// NewLazy opens c with open (Open or OpenReader) when Store is first called.
func NewLazy(c Config, open func(context.Context, Config) (*Store, error)) *Lazy {
	return &Lazy{open: open, cfg: c}
}

// Store is the open archive, opened now if it is not yet.
func (l *Lazy) Store(ctx context.Context) (*Store, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.store != nil {
		return l.store, nil
	}
	s, err := l.open(ctx, l.cfg)
	if err != nil {
		return nil, err
	}
	l.store = s
	return s, nil
}

// Close releases the pool, if one was opened.
func (l *Lazy) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.store != nil {
		l.store.Close()
		l.store = nil
	}
}
