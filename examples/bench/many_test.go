package bench

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/viccon/sturdyc"

	"github.com/herdguard/herdguard/internal/redistest"
	"github.com/herdguard/herdguard/resilience"
)

const (
	// batchKeys is how many keys each batch asks; batchCold of them are
	// cold (asked for the first time), the rest warm in the cache.
	batchKeys = 1000
	batchCold = 100
	// batchCapacity holds every key a run makes, so no warm key is
	// evicted and reloaded.
	batchCapacity = 4 << 20
)

// batches makes the key lists of a run: the same warm keys in every
// batch, with batchCold new keys spread among them each time.
type batches struct {
	warm []string
	keys []string // the current batch
	at   []int    // where its cold keys are
}

func newBatches() *batches {
	bs := &batches{}
	for i := range batchKeys - batchCold {
		bs.warm = append(bs.warm, "w"+strconv.Itoa(i))
	}
	for i := range batchKeys {
		if i%(batchKeys/batchCold) == 0 {
			bs.at = append(bs.at, i)
			bs.keys = append(bs.keys, "")
			continue
		}
		bs.keys = append(bs.keys, bs.warm[i-len(bs.at)])
	}
	return bs
}

// next returns the next batch's keys: the warm ones and batchCold fresh
// ones. The slice is reused.
func (bs *batches) next() []string {
	for _, i := range bs.at {
		bs.keys[i] = "c" + strconv.FormatInt(seq.Add(1), 10)
	}
	return bs.keys
}

// batchLoad counts the calls and the keys of a batch loader.
type batchLoad struct{ calls, keys atomic.Int64 }

func (l *batchLoad) load(_ context.Context, ids []string) (map[string]string, error) {
	l.calls.Add(1)
	l.keys.Add(int64(len(ids)))
	out := make(map[string]string, len(ids))
	for _, id := range ids {
		out[id] = l2Value(id)
	}
	return out, nil
}

func (l *batchLoad) report(b *testing.B) {
	b.ReportMetric(float64(l.keys.Load())/float64(b.N), "loads/op")
	b.ReportMetric(float64(l.calls.Load())/float64(b.N), "loadcalls/op")
}

// BenchmarkGetMany: a batch of 1,000 keys, 100 of them cold, in one call,
// beside sturdyc's GetOrFetchBatch (in-process); the pipeline also with
// Redis and Lock (L1 on), where the cold keys cost one look and one
// write-back. loads/op is keys loaded per batch (100 when each cold key
// is loaded once), loadcalls/op the batch loader's calls.
func BenchmarkGetMany(b *testing.B) {
	ctx := context.Background()
	check := func(b *testing.B, got map[string]string, keys []string) {
		if len(got) != len(keys) || got[keys[0]] != l2Value(keys[0]) {
			b.Fatalf("%d values, %q for %q", len(got), got[keys[0]], keys[0])
		}
	}
	// rt, if not nil, counts the round trips of the pipeline's client.
	pipeline := func(name string, rt *roundTrips, build func(*resilience.Builder[string]) *resilience.Builder[string]) func(*testing.B) {
		return func(b *testing.B) {
			p, err := build(resilience.New[string](name).Cache(time.Hour).MaxEntries(batchCapacity).SingleFlight()).Build()
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = p.Close() })
			bs := newBatches()
			warm := &batchLoad{}
			if _, err := p.GetMany(ctx, bs.warm, warm.load); err != nil {
				b.Fatal(err)
			}
			l := &batchLoad{}
			values := make(map[string]string, batchKeys)
			var mark since
			if rt != nil {
				mark = rt.mark()
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				keys := bs.next()
				rs, err := p.GetMany(ctx, keys, l.load)
				if err != nil {
					b.Fatal(err)
				}
				clear(values)
				for k, r := range rs {
					values[k] = r.Value
				}
				check(b, values, keys)
			}
			b.StopTimer()
			l.report(b)
			if rt != nil {
				mark.report(b)
			}
		}
	}
	runContenders(b, []contender{
		{"pipeline.GetMany", pipeline("many", nil, func(bl *resilience.Builder[string]) *resilience.Builder[string] { return bl })},
		{"pipeline.GetMany+Redis+Lock", func(b *testing.B) {
			s := redistest.Start(b)
			rdb, rt := counted(s)
			pipeline("many-redis", rt, func(bl *resilience.Builder[string]) *resilience.Builder[string] {
				return bl.Redis(rdb).Lock(resilience.LockSettings{})
			})(b)
		}},
		{"sturdyc.GetOrFetchBatch", func(b *testing.B) {
			c := sturdyc.New[string](batchCapacity, sturdycShards, time.Hour, 10, sturdyc.WithNoContinuousEvictions())
			keyFn := c.BatchKeyFn("k")
			bs := newBatches()
			warm := &batchLoad{}
			if _, err := c.GetOrFetchBatch(ctx, bs.warm, keyFn, warm.load); err != nil {
				b.Fatal(err)
			}
			l := &batchLoad{}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				keys := bs.next()
				got, err := c.GetOrFetchBatch(ctx, keys, keyFn, l.load)
				if err != nil {
					b.Fatal(err)
				}
				check(b, got, keys)
			}
			b.StopTimer()
			l.report(b)
		}},
	})
}
