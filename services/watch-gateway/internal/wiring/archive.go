package wiring

import (
	"context"
	"errors"
	"sync"

	"github.com/agentplane/agentplane/libs/archive"
)

// lazyArchive opens the run archive for reading on first use, and again after a failed open or
// read: the gateway starts (and serves everything else) while the database is away, and its reads
// answer UNAVAILABLE until it is back. Why a read failed goes to log, not to the caller.
type lazyArchive struct {
	cfg archive.Config
	log func(error)

	mu    sync.Mutex
	store *archive.Store
}

func (l *lazyArchive) get(ctx context.Context) (*archive.Store, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.store != nil {
		return l.store, nil
	}
	s, err := archive.OpenReader(ctx, l.cfg)
	if err != nil {
		l.log(err)
		return nil, err
	}
	l.store = s
	return s, nil
}

func (l *lazyArchive) List(ctx context.Context, q archive.Query) (archive.Page, error) {
	s, err := l.get(ctx)
	if err != nil {
		return archive.Page{}, err
	}
	p, err := s.List(ctx, q)
	if err != nil && !archive.IsBadQuery(err) {
		l.log(err)
	}
	return p, err
}

func (l *lazyArchive) Get(ctx context.Context, uid string) (archive.Record, error) {
	s, err := l.get(ctx)
	if err != nil {
		return archive.Record{}, err
	}
	r, err := s.Get(ctx, uid)
	if err != nil && !errors.Is(err, archive.ErrNotFound) {
		l.log(err)
	}
	return r, err
}

// Close releases the pool, if one was opened.
func (l *lazyArchive) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.store != nil {
		l.store.Close()
		l.store = nil
	}
}
