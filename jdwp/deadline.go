package jdwp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"
)

type deadliner interface {
	SetDeadline(time.Time) error
}

// watchContext makes a blocking read or write on rw return when ctx is done,
// by moving rw's deadline into the past. The returned function stops watching
// and clears the deadline. Without deadline support it does nothing.
func watchContext(ctx context.Context, rw any) (stop func()) {
	d, ok := rw.(deadliner)
	if !ok || ctx.Done() == nil {
		return func() {}
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = d.SetDeadline(dl)
	}
	fired := make(chan struct{})
	cancel := context.AfterFunc(ctx, func() {
		_ = d.SetDeadline(time.Unix(1, 0))
		close(fired)
	})
	return func() {
		if !cancel() {
			<-fired // let it finish before the deadline is cleared
		}
		_ = d.SetDeadline(time.Time{})
	}
}

// ctxErr prefers the context's error when the context ended, so callers see
// context.DeadlineExceeded rather than an i/o timeout.
func ctxErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("%w (%v)", cerr, err)
	}
	// The socket's deadline, copied from ctx, can fire just before ctx's
	// own timer does.
	if dl, ok := ctx.Deadline(); ok && errors.Is(err, os.ErrDeadlineExceeded) && !time.Now().Before(dl) {
		return fmt.Errorf("%w (%v)", context.DeadlineExceeded, err)
	}
	return err
}
