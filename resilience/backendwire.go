package resilience

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"

	"github.com/herdguard/herdguard/backend"
	"github.com/herdguard/herdguard/internal/coord"
	"github.com/herdguard/herdguard/internal/rcache/remote"
)

// wireBackend opens the pipeline's view of its Backend and makes it the
// L2, the notifier, and with Lock the lock, behind the guard (breaker and
// operation timeout) the Redis stages have; and it makes the backend's
// announcements keep L1 coherent, as watchWrites does with Redis's.
func (p *Pipeline[V]) wireBackend(c config[V]) error {
	o := c.backendOpts
	if o.OpTimeout == 0 {
		o.OpTimeout = DefaultBackendTimeout
	}
	br, err := p.infraBreaker(c, o.SharedBreaker, o.Breaker, "backend", "BackendOptions")
	if err != nil {
		return err
	}
	p.redisGuard = &coord.Guard{Breaker: br, OpTimeout: o.OpTimeout, Deadline: true}
	sh, err := c.backend.Open(backend.Scope{Namespace: c.name, Heartbeat: lockDefaults(c.lock).Heartbeat})
	if err != nil {
		return fmt.Errorf("resilience: pipeline %q: open the backend: %w", c.name, err)
	}
	if sh == nil {
		return &ConfigError{Pipeline: c.name, Field: "Backend", Problem: "Open returned no view and no error"}
	}
	rs, err := remote.New[V](sh, remote.Options{
		Namespace: c.name, Codec: o.Codec, Encrypt: o.Encrypt, OnCorrupt: p.l2Corrupt,
	})
	if err != nil {
		_ = sh.Close()
		return &ConfigError{Pipeline: c.name, Field: "Backend", Problem: err.Error()}
	}
	p.l2 = remote.NewAnnounced(rs, sh)
	p.notifier = sh
	if c.lockOn {
		p.locker = sh
	}
	d := p.deps()
	d.Check = coord.CheckBackend(sh)
	p.co = coord.NewBackend(d, sh)
	p.writes.origin = newOrigin()
	stop := sh.Watch(func(key, origin string) {
		if origin != p.writes.origin {
			p.dropLocal(key)
		}
	}, func() {
		p.dropAllLocal()
		p.writes.resubscribed.Add(1)
	})
	p.closers = append(p.closers, func() error { stop(); return nil }, sh.Close)
	return nil
}

// l2Corrupt hears the L2 store's reads of bytes that do not decode.
func (p *Pipeline[V]) l2Corrupt(_ string, err error) {
	if p.decryptFailed(err) {
		return
	}
	if p.tel.Metering() {
		p.tel.Corrupt(context.Background(), "l2")
	}
}

// l2Attrs is the attributes of an L2 client span: db.system.name and
// the operation, Redis's command or the backend's method.
func (p *Pipeline[V]) l2Attrs(redisOp, backendOp string, more ...attribute.KeyValue) []attribute.KeyValue {
	return p.co.L2Attrs(redisOp, backendOp, more...)
}
