// Package jaegere2e runs the stampede harness (examples/stampede, its pods
// separate processes) with OTEL_EXPORTER_OTLP_ENDPOINT pointing at a real
// Jaeger (all-in-one, in-memory storage, every port on 127.0.0.1), then
// reads the traces back through Jaeger's HTTP API and checks the spans of
// the lock winner, a waiter, a coalesced caller and a fail-open call, the
// pods' service names and the Redis command spans of redisotel.
//
//	cd examples && go test -v -run Jaeger ./jaegere2e
//
// The first run builds Jaeger (the jaeger tool of the jaegertool module,
// v1.76.0), which takes minutes; -short skips the test.
package jaegere2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The pods' services are these, with -pod-N.
const (
	service         = "herdguard-e2e"
	failOpenService = "herdguard-e2e-failopen"
)

// jaegerConfig is an all-in-one configuration with in-memory storage, the
// OTLP/HTTP receiver and the query service, all on loopback.
const jaegerConfig = `
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: mem
    http:
      endpoint: 127.0.0.1:%d
    grpc:
      endpoint: 127.0.0.1:%d
  jaeger_storage:
    backends:
      mem:
        memory:
          max_traces: 10000
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:%d
processors:
  batch:
    timeout: 200ms
exporters:
  jaeger_storage_exporter:
    trace_storage: mem
`

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// buildJaeger builds the jaeger tool of the jaegertool module into dir.
// The first build takes minutes; later ones come from the build cache.
func buildJaeger(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "jaeger")
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/jaegertracing/jaeger/cmd/jaeger")
	cmd.Dir = "jaegertool"
	// jaegertool is a module of its own, outside the workspace.
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build jaeger: %v\n%s", err, out)
	}
	t.Logf("built jaeger in %v", time.Since(start).Round(time.Second))
	return bin
}

// startJaeger runs Jaeger until the test ends and returns the OTLP/HTTP
// endpoint and the query base URL. Its ports are picked free just before
// it starts, and another process may take one in between: a start that
// fails to bind is tried again on other ports, three times at most.
func startJaeger(t *testing.T) (otlp, query string) {
	t.Helper()
	dir := t.TempDir()
	bin := buildJaeger(t, dir)
	for try := 1; ; try++ {
		otlp, query, err := runJaeger(t, bin, dir)
		if err == nil {
			return otlp, query
		}
		if !errors.Is(err, errPortTaken) || try == 3 {
			t.Fatal(err)
		}
		t.Logf("jaeger start %d: %v; again on other ports", try, err)
	}
}

// errPortTaken marks a Jaeger that exited because one of its ports was
// taken.
var errPortTaken = errors.New("a port was taken")

// runJaeger starts bin on free ports (its config in dir) and waits until
// its query service answers; the process runs until the test ends.
func runJaeger(t *testing.T, bin, dir string) (otlp, query string, err error) {
	t.Helper()
	queryPort, grpcPort, otlpPort := freePort(t), freePort(t), freePort(t)
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, jaegerConfig, queryPort, grpcPort, otlpPort), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cmd := exec.Command(bin, "--config", cfg)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			t.Error("jaeger did not exit")
		}
		if t.Failed() {
			t.Logf("jaeger log:\n%s", tailOf(logs.String(), 4000))
		}
	})
	query = "http://127.0.0.1:" + strconv.Itoa(queryPort)
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-exited:
			exited <- err
			// Wait has returned: the log is whole.
			if strings.Contains(logs.String(), "address already in use") {
				return "", "", fmt.Errorf("jaeger exited: %v: %w", err, errPortTaken)
			}
			return "", "", fmt.Errorf("jaeger exited: %v\n%s", err, tailOf(logs.String(), 4000))
		default:
		}
		// A short timeout: a port taken by another process may accept and
		// never answer.
		if resp, err := (&http.Client{Timeout: 2 * time.Second}).Get(query + "/api/services"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("jaeger's query service not up in 60s\n%s", tailOf(logs.String(), 4000))
		}
		time.Sleep(100 * time.Millisecond)
	}
	return "http://127.0.0.1:" + strconv.Itoa(otlpPort), query, nil
}

func tailOf(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// buildHarness builds the stampede harness into dir.
func buildHarness(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "stampede")
	cmd := exec.Command("go", "build", "-o", bin, "../stampede")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build stampede: %v\n%s", err, out)
	}
	return bin
}

// round is the part of the harness's JSON report the test reads.
type round struct {
	Round       int            `json:"round"`
	LoaderCalls int            `json:"loader_calls"`
	Errors      int            `json:"errors"`
	FailOpen    int            `json:"fail_open"`
	Sources     map[string]int `json:"sources"`
	PodErrors   []string       `json:"pod_errors"`
}

// runHarness runs the harness with args, its pods exporting to otlp as
// service-pod-N, and returns its rounds.
func runHarness(t *testing.T, bin, otlp, service string, args ...string) []round {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append(args, "-json")...)
	cmd.Env = append(os.Environ(),
		"OTEL_EXPORTER_OTLP_ENDPOINT="+otlp,
		"OTEL_SERVICE_NAME="+service,
		"OTEL_METRICS_EXPORTER=none", // Jaeger takes traces only
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("stampede %v: %v\n%s", args, err, stderr.String())
	}
	var rounds []round
	dec := json.NewDecoder(&stdout)
	for dec.More() {
		var r round
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("stampede's report: %v", err)
		}
		rounds = append(rounds, r)
	}
	return rounds
}

func TestJaeger_stampedeTraces(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs Jaeger")
	}
	otlp, query := startJaeger(t)
	bin := buildHarness(t, t.TempDir())

	// The stampede: 3 pods of 3 callers each ask for one cold key at once,
	// after the harness's warm-up round on another key.
	const pods, callers = 3, 3
	rounds := runHarness(t, bin, otlp, service, "-pods", strconv.Itoa(pods), "-callers", strconv.Itoa(callers),
		"-rounds", "1", "-load", "500ms")
	if len(rounds) != 1 {
		t.Fatalf("harness reported %d rounds, want 1", len(rounds))
	}
	r := rounds[0]
	if r.LoaderCalls != 1 || r.Errors != 0 || r.FailOpen != 0 || len(r.PodErrors) > 0 ||
		r.Sources["loader"] != 1 || r.Sources["waited"] != pods-1 || r.Sources["coalesced"] != pods*callers-pods {
		t.Fatalf("round %+v; want 1 load, 1 loader, %d waited, the rest coalesced", r, pods-1)
	}

	// One pod, whose Redis dies 100 ms into round 1 (while the winner
	// loads): round 2 fails open.
	fo := runHarness(t, bin, otlp, failOpenService, "-pods", "1", "-callers", "1", "-rounds", "2",
		"-load", "500ms", "-kill-redis-after", "100ms")
	if len(fo) != 2 || fo[1].FailOpen != 1 || fo[1].Sources["loader"] != 1 {
		t.Fatalf("fail-open run: %+v, want round 2 to be one failed-open loader call", fo)
	}

	// Every pod exported as a service of its own.
	var podServices []string
	for i := range pods {
		podServices = append(podServices, fmt.Sprintf("%s-pod-%d", service, i))
	}
	// Two rounds (the warm-up and round 1) of pods x callers calls.
	want := 2 * pods * callers
	traces, redisTraces := waitTraces(t, query, podServices, want)
	if dir := os.Getenv("HERDGUARD_JAEGER_DUMP"); dir != "" {
		dumpTraces(t, query, append(podServices, failOpenService+"-pod-0"), dir)
	}
	byRoot := map[string][]*jTrace{}
	services := map[string]int{}
	for _, tr := range traces {
		get := tr.root()
		byRoot[get.tag("herdguard.source")] = append(byRoot[get.tag("herdguard.source")], tr)
		services[tr.service(get)]++
	}
	if len(byRoot["loader"]) != 2 || len(byRoot["waited"]) != 2*(pods-1) || len(byRoot["coalesced"]) != 2*(pods*callers-pods) {
		t.Fatalf("traces by source: loader %d, waited %d, coalesced %d",
			len(byRoot["loader"]), len(byRoot["waited"]), len(byRoot["coalesced"]))
	}
	for _, s := range podServices {
		if services[s] != 2*callers {
			t.Fatalf("calls traced by service: %v; want %d from each of %v", services, 2*callers, podServices)
		}
	}
	// redisotel names each command the pods send, pipelined batches and
	// scripts included, in traces of their own: a batch serves many calls.
	ops := map[string]bool{}
	for _, tr := range redisTraces {
		for _, s := range tr.Spans {
			ops[strings.Fields(s.OperationName)[0]] = true
		}
	}
	if !ops["evalsha"] {
		t.Fatalf("no evalsha span among the Redis command spans %v", ops)
	}
	winner := byRoot["loader"][0]

	// The winner: the lock acquired, with a fence; the load and the
	// write-back under it.
	wantTree(t, "winner", winner, `
resilience.get pipeline=stampede source=loader failed_open=false
  resilience.l1 hit=false
  resilience.singleflight shared=false
    resilience.l2 db=redis hit=false
    resilience.lock outcome=acquired
      resilience.load
      resilience.writeback db=redis
`)
	if f := winner.named("resilience.lock")[0].tag("herdguard.lock.fence"); f == "" || f == "0" {
		t.Fatalf("winner's lock fence = %q, want a positive fence", f)
	}
	// A waiter: it waited on the lock and read the winner's value from L2.
	waiter := byRoot["waited"][0]
	got := waiter.render()
	if !strings.HasPrefix(got, strings.TrimLeft(`
resilience.get pipeline=stampede source=waited failed_open=false
  resilience.l1 hit=false
  resilience.singleflight shared=false
    resilience.l2 db=redis hit=false
    resilience.lock outcome=waited
      resilience.lock.wait
`, "\n")) || !strings.HasSuffix(got, "        resilience.l2 db=redis hit=true\n") {
		t.Fatalf("waiter's trace:\n%s", got)
	}
	// A coalesced caller links to the single-flight span of its pod's
	// leader, in another trace.
	co := byRoot["coalesced"][0]
	wantTree(t, "coalesced", co, `
resilience.get pipeline=stampede source=coalesced failed_open=false
  resilience.l1 hit=false
  resilience.singleflight shared=true
`)
	sf := co.named("resilience.singleflight")[0]
	var linked bool
	for _, ref := range sf.References {
		if ref.RefType == "FOLLOWS_FROM" && ref.TraceID != co.TraceID {
			for _, tr := range append(byRoot["loader"], byRoot["waited"]...) {
				for _, s := range tr.named("resilience.singleflight") {
					linked = linked || (tr.TraceID == ref.TraceID && s.SpanID == ref.SpanID)
				}
			}
		}
	}
	if !linked {
		t.Fatalf("coalesced caller's single-flight span references %+v, want a link to a leader's single-flight span", sf.References)
	}

	// The fail-open call: L2 failed, the call loaded without the lock.
	foTraces, _ := waitTraces(t, query, []string{failOpenService + "-pod-0"}, 3)
	var failOpen *jTrace
	for _, tr := range foTraces {
		if tr.root().tag("herdguard.failed_open") == "true" && len(tr.named("resilience.lock")) == 0 {
			failOpen = tr
		}
	}
	if failOpen == nil {
		t.Fatalf("no failed-open call without the lock among %d traces", len(foTraces))
	}
	wantTree(t, "fail-open", failOpen, `
resilience.get pipeline=stampede source=loader failed_open=true
  resilience.l1 hit=false
  resilience.singleflight shared=false
    resilience.l2 db=redis hit=false failed_open=true reason=redis_error log=failed open
    resilience.load
`)
}

func wantTree(t *testing.T, what string, tr *jTrace, want string) {
	t.Helper()
	if got, want := tr.render(), strings.TrimLeft(want, "\n"); got != want {
		t.Fatalf("%s's trace %s:\n%s\nwant:\n%s", what, tr.TraceID, got, want)
	}
}

// waitTraces polls Jaeger until it holds n calls' traces (rooted in
// resilience.get) of the services, and returns them with the traces of
// Redis commands (rooted in a redisotel span).
func waitTraces(t *testing.T, query string, services []string, n int) (calls, redis []*jTrace) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		calls, redis = nil, nil
		seen := map[string]bool{}
		for _, svc := range services {
			for _, tr := range fetchTraces(query, svc) {
				if seen[tr.TraceID] {
					continue
				}
				seen[tr.TraceID] = true
				if tr.root() != nil {
					calls = append(calls, tr)
				} else if tr.redisRoot() {
					redis = append(redis, tr)
				}
			}
		}
		if len(calls) >= n && len(redis) > 0 {
			return calls, redis
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("jaeger holds %d calls' traces and %d Redis traces of %v, want %d and some", len(calls), len(redis), services, n)
	return nil, nil
}

func fetchTraces(query, svc string) []*jTrace {
	resp, err := http.Get(query + "/api/traces?service=" + svc + "&limit=1000&lookback=1h")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var body struct {
		Data []*jTrace `json:"data"`
	}
	if json.NewDecoder(resp.Body).Decode(&body) != nil {
		return nil
	}
	return body.Data
}

// dumpTraces writes the services' traces, as Jaeger's API returns them, to
// dir/traces.json; docs/trace-view.html draws them.
func dumpTraces(t *testing.T, query string, services []string, dir string) {
	t.Helper()
	var all []json.RawMessage
	for _, svc := range services {
		resp, err := http.Get(query + "/api/traces?service=" + svc + "&limit=1000&lookback=1h")
		if err != nil {
			t.Fatalf("dump traces: %v", err)
		}
		var body struct {
			Data []json.RawMessage `json:"data"`
		}
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("dump traces: %v", err)
		}
		all = append(all, body.Data...)
	}
	b, err := json.Marshal(map[string]any{"data": all})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "traces.json"), b, 0o644); err != nil {
		t.Fatalf("dump traces: %v", err)
	}
}
