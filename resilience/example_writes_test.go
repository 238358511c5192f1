package resilience_test

import (
	"context"
	"fmt"
	"time"

	"github.com/herdguard/herdguard/resilience"
)

func ExamplePipeline_Invalidate() {
	prices, _ := resilience.New[int]("prices").Cache(time.Minute).SingleFlight().Build()
	defer prices.Close()
	ctx := context.Background()
	row := 100 // the database
	load := func(context.Context, string) (int, error) { return row, nil }

	v, _ := prices.Get(ctx, "sku-1", load)
	fmt.Println(v)
	row = 120                           // the row changes...
	_ = prices.Invalidate(ctx, "sku-1") // ...so every pod drops its copy
	r, _ := prices.GetResult(ctx, "sku-1", load)
	fmt.Println(r.Value, r.Source)
	// Output:
	// 100
	// 120 loader
}

func ExamplePipeline_Set() {
	prices, _ := resilience.New[int]("prices-set").Cache(time.Minute).SingleFlight().Build()
	defer prices.Close()
	ctx := context.Background()
	load := func(context.Context, string) (int, error) { return 100, nil }

	_ = prices.Set(ctx, "sku-1", 130) // written through: every pod sees 130
	r, _ := prices.GetResult(ctx, "sku-1", load)
	fmt.Println(r.Value, r.Source)
	v, found, _ := prices.Peek(ctx, "sku-2") // no load, no lock
	fmt.Println(v, found)
	// Output:
	// 130 l1
	// 0 false
}

func ExampleSetTTL() {
	rates, _ := resilience.New[string]("rates").Cache(time.Hour).Build()
	defer rates.Close()
	load := func(ctx context.Context, _ string) (string, error) {
		// The upstream said Cache-Control: max-age=300.
		resilience.SetTTL(ctx, 5*time.Minute)
		return "1.08", nil
	}
	v, _ := rates.Get(context.Background(), "EURUSD", load)
	fmt.Println(v)
	// Output: 1.08
}
