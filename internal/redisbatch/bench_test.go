package redisbatch

import (
	"context"
	"testing"
	"time"

	"github.com/herdguard/herdguard/internal/redistest"
)

// BenchmarkHGet_serial is one caller's HGET, through the batcher (on a
// sender goroutine) and straight through the client (on the caller's),
// against the same Redis: the price of the hand-off.
func BenchmarkHGet_serial(b *testing.B) {
	srv := redistest.Start(b)
	rdb := srv.Client()
	ctx := context.Background()
	if err := rdb.HSet(ctx, "h", "v", "x").Err(); err != nil {
		b.Fatal(err)
	}
	bat := New(rdb, time.Second)
	b.Run("batcher", func(b *testing.B) {
		for b.Loop() {
			if err := bat.HGet(ctx, "h", "v").Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("client", func(b *testing.B) {
		for b.Loop() {
			if err := rdb.HGet(ctx, "h", "v").Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
