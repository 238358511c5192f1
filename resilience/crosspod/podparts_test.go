package crosspod_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/herdguard/herdguard/internal/podproc"
)

// holds keeps held loads waiting until the parent finishes their key.
// The zero value is ready to use.
type holds struct {
	mu       sync.Mutex // guards the fields below
	finished map[string]bool
	waiting  map[string]chan struct{}
	all      bool // finishAll was called: nothing waits any more
}

var errHeldTooLong = errors.New("crosspod: held load never finished")

// wait blocks until key is finished (at once if it already was), ctx
// ends, or holdCap passes.
func (h *holds) wait(ctx context.Context, key string) error {
	h.mu.Lock()
	if h.all || h.finished[key] {
		h.mu.Unlock()
		return nil
	}
	if h.waiting == nil {
		h.waiting = map[string]chan struct{}{}
	}
	ch, ok := h.waiting[key]
	if !ok {
		ch = make(chan struct{})
		h.waiting[key] = ch
	}
	h.mu.Unlock()
	t := time.NewTimer(holdCap)
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return errHeldTooLong
	}
}

// finish releases key's held loads, and every later one.
func (h *holds) finish(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.finished == nil {
		h.finished = map[string]bool{}
	}
	h.finished[key] = true
	if ch, ok := h.waiting[key]; ok {
		close(ch)
		delete(h.waiting, key)
	}
}

// finishAll releases every held load, and every later one.
func (h *holds) finishAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.all = true
	for k, ch := range h.waiting {
		close(ch)
		delete(h.waiting, k)
	}
}

// scriptHook reports every Lua script a pod's client runs (the lock's
// acquire, extend and release, the fenced write), with its first key and
// its error, after Redis answered. The parent orders its faults on these:
// "pod 2 has tried the lock" is the end of pod 2's first script on the key.
type scriptHook struct {
	em  *podproc.Writer
	pod int
}

func (h *scriptHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.report(cmd, err)
		return err
	}
}

func (h *scriptHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			h.report(c, c.Err())
		}
		return err
	}
}

func (h *scriptHook) report(cmd redis.Cmder, err error) {
	switch cmd.Name() {
	case "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro":
	default:
		return
	}
	if redis.HasErrorPrefix(err, "NOSCRIPT") {
		return // go-redis sends the script itself next
	}
	ev := event{Ev: "script", Pod: h.pod, Cmd: cmd.Name(), Key: firstKey(cmd.Args())}
	if err != nil && !errors.Is(err, redis.Nil) {
		ev.Err = err.Error()
	}
	h.em.Emit(ev)
}

// firstKey returns the first key of EVAL-like arguments: name, script or
// sha, numkeys, keys..., args...
func firstKey(args []any) string {
	if len(args) < 4 {
		return ""
	}
	if n, err := strconv.Atoi(fmt.Sprint(args[2])); err != nil || n < 1 {
		return ""
	}
	return fmt.Sprint(args[3])
}

// formatValue is what a load returns: key|pod|seq|start in Unix
// nanoseconds. Pods share the machine's clock, so start times order loads
// across pods.
func formatValue(key string, pod int, seq int64, start time.Time) string {
	return fmt.Sprintf("%s|%d|%d|%d", key, pod, seq, start.UnixNano())
}

// loadValue is a parsed load value.
type loadValue struct {
	Key   string
	Pod   int
	Seq   int64
	Start time.Time
}

func parseValue(v string) (loadValue, error) {
	f := strings.Split(v, "|")
	if len(f) != 4 {
		return loadValue{}, fmt.Errorf("crosspod: value %q is not key|pod|seq|start", v)
	}
	pod, err1 := strconv.Atoi(f[1])
	seq, err2 := strconv.ParseInt(f[2], 10, 64)
	ns, err3 := strconv.ParseInt(f[3], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return loadValue{}, fmt.Errorf("crosspod: value %q: %w", v, err)
	}
	return loadValue{Key: f[0], Pod: pod, Seq: seq, Start: time.Unix(0, ns)}, nil
}
