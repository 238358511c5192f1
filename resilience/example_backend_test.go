package resilience_test

import (
	"context"
	"fmt"
	"time"

	"github.com/herdguard/herdguard/backend/backendtest"
	"github.com/herdguard/herdguard/resilience"
)

func ExampleBuilder_Backend() {
	// Two pipelines of one name over one backend stand for two processes
	// sharing a database.
	var shared backendtest.Memory
	build := func() *resilience.Pipeline[string] {
		p, err := resilience.New[string]("prices").
			Cache(time.Minute).
			Lock(resilience.LockSettings{}).
			Backend(&shared).
			BackendOptions(resilience.BackendOptions{OpTimeout: 100 * time.Millisecond}).
			Build()
		if err != nil {
			panic(err)
		}
		return p
	}
	a, b := build(), build()
	defer a.Close()
	defer b.Close()
	load := func(ctx context.Context, sku string) (string, error) { return "9.99", nil }
	ctx := context.Background()
	r, _ := a.GetResult(ctx, "sku-1", load)
	fmt.Println(r.Value, r.Source)
	r, _ = b.GetResult(ctx, "sku-1", load)
	fmt.Println(r.Value, r.Source)
	_ = a.Set(ctx, "sku-1", "8.99") // b drops its copy when it hears it
	r, _ = b.GetResult(ctx, "sku-1", load)
	fmt.Println(r.Value, r.Source)
	// Output:
	// 9.99 loader
	// 9.99 l2
	// 8.99 l2
}
