// Command prometheus exposes a pipeline's metrics to Prometheus: the
// OpenTelemetry Prometheus exporter turns the pipeline's instruments into
// a /metrics page (herdguard.calls becomes herdguard_calls_total, the
// attribute herdguard.source the label herdguard_source, and so on), served
// on a loopback address. It runs a stampede against Redis so that there is
// something to see, then serves until interrupted.
//
//	go run ./prometheus -redis 127.0.0.1:6379
//	curl -s http://127.0.0.1:9464/metrics | grep herdguard_
//
// docs/grafana-dashboard.json charts these metrics; the tests check that
// every metric its queries name is on the page, and have a real Prometheus
// server scrape the page and evaluate every panel's query.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"time"

	promclient "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/herdguard/herdguard/breaker"
	"github.com/herdguard/herdguard/resilience"
)

func main() {
	addr := flag.String("redis", "127.0.0.1:6379", "Redis address")
	listen := flag.String("listen", "127.0.0.1:9464", "address of the /metrics page")
	callers := flag.Int("callers", 200, "callers asking for the cold key at once")
	keys := flag.Int("keys", 100, "then a burst of this many cold keys")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *addr, *listen, *callers, *keys); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, addr, listen string, callers, keys int) error {
	m, err := NewMetrics(listen)
	if err != nil {
		return err
	}
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	p, err := NewPipeline("reports", rdb, m.Provider)
	if err != nil {
		return err
	}
	defer p.Close()
	loads := Stampede(ctx, p, callers, keys, time.Now().Format("150405"))
	fmt.Printf("loads: %d for %d keys; metrics on http://%s/metrics (Ctrl-C to stop)\n", loads, keys+1, m.Addr)
	<-ctx.Done()
	return nil
}

// Metrics is a MeterProvider whose instruments a Prometheus registry
// exposes on a loopback /metrics page.
type Metrics struct {
	Provider *sdkmetric.MeterProvider
	Addr     string // host:port of the page
	srv      *http.Server
	done     chan struct{}
}

// NewMetrics serves the page on listen (a loopback address; port 0 picks
// one).
func NewMetrics(listen string) (*Metrics, error) {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, err
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("prometheus example: %q is not a loopback address", listen)
	}
	reg := promclient.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	m := &Metrics{
		Provider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp)),
		Addr:     ln.Addr().String(),
		srv:      &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second},
		done:     make(chan struct{}),
	}
	go func() {
		defer close(m.done)
		if err := m.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Print(err)
		}
	}()
	return m, nil
}

// Close stops the page and the provider.
func (m *Metrics) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := m.srv.Shutdown(ctx)
	<-m.done
	return errors.Join(err, m.Provider.Shutdown(ctx))
}

// NewPipeline is the pipeline the example watches: L1, Redis, the lock, a
// loader breaker and a default, its metrics going to mp.
func NewPipeline(name string, rdb redis.UniversalClient, mp *sdkmetric.MeterProvider) (*resilience.Pipeline[string], error) {
	return resilience.New[string](name).
		Cache(time.Minute).
		Redis(rdb).
		Lock(resilience.LockSettings{}).
		Breaker(breaker.Settings{Failures: 2, OpenTimeout: time.Minute}).
		DefaultValue("unknown").
		MeterProvider(mp).
		Build()
}

// Stampede asks for one cold key from callers goroutines at once, then for
// a burst of keys cold keys at once, and returns how many loads ran. run
// makes the keys fresh.
func Stampede(ctx context.Context, p *resilience.Pipeline[string], callers, keys int, run string) int {
	var mu sync.Mutex
	loads := 0
	load := func(ctx context.Context, key string) (string, error) {
		mu.Lock()
		loads++
		mu.Unlock()
		select {
		case <-time.After(100 * time.Millisecond):
			return "value of " + key, nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() { _, _ = p.Get(ctx, run+":hot", load) })
	}
	wg.Wait()
	for i := range keys {
		wg.Go(func() { _, _ = p.Get(ctx, fmt.Sprintf("%s:burst-%d", run, i), load) })
	}
	wg.Wait()
	return loads
}
