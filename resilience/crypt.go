package resilience

import (
	"context"
	"errors"
	"log/slog"
	"strings"

	"github.com/herdguard/herdguard/cache"
)

// decryptFailed records an L2 entry that did not decrypt, and reports
// whether err was one: a miss, counted as herdguard.cache.corrupt with
// herdguard.reason=decrypt_failed, and logged (at most once a minute, with the
// corrupt entries) with the reason, which names key ids and never keys
// or key material. It is the first sign of a rotation step deployed out of
// order.
func (p *Pipeline[V]) decryptFailed(err error) bool {
	if !errors.Is(err, cache.ErrDecrypt) {
		return false
	}
	ctx := context.Background()
	if p.tel.Metering() {
		p.tel.DecryptFailed(ctx, "l2")
	}
	p.logs.episode(ctx, &p.logs.corrupt, slog.LevelWarn, "herdguard: a value in Redis did not decrypt; treated as a miss",
		"reason", strings.TrimPrefix(err.Error(), cache.ErrDecrypt.Error()+": "))
	return true
}
