package grpcx

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Retry bounds RetryUnavailable: AttemptTimeout per call, RetryFor in all.
type Retry struct {
	AttemptTimeout time.Duration
	RetryFor       time.Duration
}

// RetryUnavailable calls fn until it succeeds, fails with a code other than UNAVAILABLE (or an
// attempt's own deadline), or r.RetryFor or ctx ends. Waits grow exponentially from 100 ms to 5 s,
// with jitter, so that a restarting peer delays callers and loses nothing. what names the peer
// in the error.
func RetryUnavailable(ctx context.Context, r Retry, what string, fn func(ctx context.Context) error) error {
	deadline := time.Now().Add(r.RetryFor)
	backoff := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, r.AttemptTimeout)
		err := fn(actx)
		cancel()
		if err == nil {
			return nil
		}
		code := status.Code(err)
		retryable := code == codes.Unavailable || (code == codes.DeadlineExceeded && ctx.Err() == nil)
		if !retryable {
			return err
		}
		sleep := backoff/2 + rand.N(backoff/2+1) //nolint:gosec // G404: jitter, not a secret
		if ctx.Err() != nil || time.Now().Add(sleep).After(deadline) {
			return fmt.Errorf("%s unavailable after %d attempts: %w", what, attempt, err)
		}
		select {
		case <-time.After(sleep):
		case <-ctx.Done():
			return fmt.Errorf("%s unavailable after %d attempts: %w", what, attempt, err)
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}
