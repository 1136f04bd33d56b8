package supervisor

import (
	"context"
	"time"
)

// A target is what the supervisor keeps a backend's session running for:
// one debuggable process (DDM), or one device's apps (heapprofd). keep
// runs its sessions one after another; the target says what each ending
// means.
type target interface {
	// session runs one session until it ends. nil means it ended as it
	// should (a rotation, a restart for a new app): the next one starts
	// at once.
	session(ctx context.Context) error
	// failed takes the error a session ended with: it counts and logs
	// it and shows the app's state. It returns how long to wait before
	// the next session (backoff is the usual wait), or forever when no
	// session is to run again for this target.
	failed(ctx context.Context, err error, backoff time.Duration) (wait time.Duration, forever bool)
	// ended shows the final state of the target's apps, by why ctx
	// ended (errPIDGone, errDeviceGone, or the daemon's stop).
	ended(cause error)
}

// keep runs t's sessions until ctx ends, backing off after failures: the
// backoff grows with each failure in a row, and starts over after a
// session that ran well for a while (twice the longest backoff).
func (d *Daemon) keep(ctx context.Context, t target) {
	for attempt := 0; ctx.Err() == nil; {
		began := time.Now()
		err := t.session(ctx)
		if ctx.Err() != nil {
			break
		}
		if err == nil {
			attempt = 0
			continue
		}
		if time.Since(began) > 2*d.cfg.BackoffMax {
			attempt = 0
		}
		wait, forever := t.failed(ctx, err, d.backoff(attempt))
		attempt++
		if forever {
			<-ctx.Done()
			break
		}
		if !sleepCtx(ctx, wait) {
			break
		}
	}
	t.ended(context.Cause(ctx))
}
