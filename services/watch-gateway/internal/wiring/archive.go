package wiring

import (
	"context"
	"errors"

	"github.com/agentplane/agentplane/libs/archive"
)

// lazyArchive is the archive, opened for reading on first use and again after a failed open or
// read: the gateway starts (and serves everything else) while the database is away, and its
// reads answer UNAVAILABLE until it is back. Why a read failed goes to log, not to the caller.
type lazyArchive struct {
	*archive.Lazy
	log func(error)
}

func newLazyArchive(c archive.Config, log func(error)) *lazyArchive {
	return &lazyArchive{Lazy: archive.NewLazy(c, archive.OpenReader), log: log}
}

func (l *lazyArchive) store(ctx context.Context) (*archive.Store, error) {
	s, err := l.Store(ctx)
	if err != nil {
		l.log(err)
	}
	return s, err
}

func (l *lazyArchive) List(ctx context.Context, q archive.Query) (archive.Page, error) {
	s, err := l.store(ctx)
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
	s, err := l.store(ctx)
	if err != nil {
		return archive.Record{}, err
	}
	r, err := s.Get(ctx, uid)
	if err != nil && !errors.Is(err, archive.ErrNotFound) {
		l.log(err)
	}
	return r, err
}
