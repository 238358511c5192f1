package rlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/herdguard/herdguard/backend"
	"github.com/redis/go-redis/v9"
)

// failure turns a go-redis error into the context's error, when ctx has
// ended, or a [*backend.BackendError]. The key (the third argument) stays out of
// the error: keys may be secrets.
func failure(ctx context.Context, op, _ string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("lock: %s: %w", op, cerr)
	}
	// A socket deadline taken from ctx may fire a hair before ctx's own
	// timer: that is still the caller's deadline, not a backend failure.
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return fmt.Errorf("lock: %s: %w", op, context.DeadlineExceeded)
	}
	return &backend.BackendError{Op: op, Err: err}
}

// isReply reports whether err is an error reply from Redis, which means the
// command ran (or was refused) and its outcome is known. Anything else (a
// broken connection, a timeout, a cancelled context) leaves it unknown.
func isReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}
