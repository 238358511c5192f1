// Command quickstart shows the stampede the toolkit prevents, in one
// process and with no Redis: 1,000 goroutines ask for one cold key at once,
// and the loader runs once.
//
//	go run ./examples/quickstart
//
// With OTEL_EXPORTER_OTLP_ENDPOINT set (e.g. http://127.0.0.1:4318), it
// exports its traces over OTLP/HTTP.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/examples/internal/otelsetup"
	"github.com/herdguard/herdguard/resilience"
)

// Report is what the expensive loader computes.
type Report struct {
	Day   string
	Total int
}

func main() {
	callers := flag.Int("callers", 1000, "goroutines asking for the cold key at once")
	loadTime := flag.Duration("load", 100*time.Millisecond, "how long the loader takes")
	flag.Parse()
	// Traces go to an OTLP endpoint only when OTEL_EXPORTER_OTLP_ENDPOINT
	// is set.
	shutdown, err := otelsetup.Install(context.Background(), "quickstart")
	if err != nil {
		log.Fatal(err)
	}
	err = run(os.Stdout, *callers, *loadTime)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if serr := shutdown(ctx); serr != nil {
		log.Print(serr)
	}
	if err != nil {
		log.Fatal(err) //nolint:gocritic // cancel has nothing left to release
	}
}

func run(w io.Writer, callers int, loadTime time.Duration) error {
	reports, err := resilience.New[Report]("reports").
		Cache(time.Minute).
		SingleFlight().
		Breaker(breaker.Settings{}).
		Timeout(2 * time.Second).
		Stale(10 * time.Minute).
		Build()
	if err != nil {
		return err
	}
	defer reports.Close()

	var loads atomic.Int64
	load := func(ctx context.Context, day string) (Report, error) {
		loads.Add(1)
		select { // stands in for a slow aggregate query
		case <-time.After(loadTime):
		case <-ctx.Done():
			return Report{}, ctx.Err()
		}
		return Report{Day: day, Total: 42}, nil
	}

	var (
		wg        sync.WaitGroup
		mu        sync.Mutex // guards sources, latencies and errs
		sources   = map[resilience.Source]int{}
		latencies = make([]time.Duration, 0, callers)
		errs      int
	)
	start := make(chan struct{})
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			t := time.Now()
			r, err := reports.GetResult(context.Background(), "2026-11-30", load)
			took := time.Since(t)
			mu.Lock()
			defer mu.Unlock()
			latencies = append(latencies, took)
			if err != nil {
				errs++
				return
			}
			sources[r.Source]++
		}()
	}
	close(start)
	wg.Wait()

	// One more call, now that the value is cached.
	r, err := reports.GetResult(context.Background(), "2026-11-30", load)
	if err != nil {
		return err
	}

	slices.Sort(latencies)
	fmt.Fprintf(w, "callers:       %d (one cold key, no Redis)\n", callers)
	fmt.Fprintf(w, "loader calls:  %d\n", loads.Load())
	fmt.Fprintf(w, "errors:        %d\n", errs)
	fmt.Fprintf(w, "sources:      ")
	for _, s := range []resilience.Source{resilience.SourceLoader, resilience.SourceCoalesced, resilience.SourceL1} {
		fmt.Fprintf(w, " %s=%d", s, sources[s])
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "latency:       p50=%v p99=%v max=%v (loader takes %v)\n",
		pct(latencies, 50), pct(latencies, 99), latencies[len(latencies)-1].Round(time.Microsecond), loadTime)
	fmt.Fprintf(w, "next call:     source=%s value=%+v\n", r.Source, r.Value)
	if n := loads.Load(); n != 1 {
		return fmt.Errorf("quickstart: expected 1 loader call, got %d", n)
	}
	return nil
}

func pct(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p+99)/100 - 1
	return sorted[max(i, 0)].Round(time.Microsecond)
}
