// Package jaegere2e runs a multi-process stampede that exports its traces
// over OTLP/HTTP to a real Jaeger (all-in-one, in-memory storage, every
// port on 127.0.0.1), then reads the traces back through Jaeger's HTTP API
// and checks the spans of the lock winner, a waiter, a coalesced caller and
// a fail-open call.
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

	"github.com/herdguard/herdguard/internal/redistest"
)

const service = "herdguard-e2e"

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
// endpoint and the query base URL.
func startJaeger(t *testing.T) (otlp, query string) {
	t.Helper()
	dir := t.TempDir()
	bin := buildJaeger(t, dir)
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
			t.Fatalf("jaeger exited: %v\n%s", err, tailOf(logs.String(), 4000))
		default:
		}
		if resp, err := http.Get(query + "/api/services"); err == nil {
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
	return "http://127.0.0.1:" + strconv.Itoa(otlpPort), query
}

func tailOf(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// runPods starts n pods of the test binary and returns their reports.
func runPods(t *testing.T, n int, env ...string) []podReport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	type result struct {
		rep podReport
		err error
	}
	results := make(chan result, n)
	for i := range n {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), env...)
		cmd.Env = append(cmd.Env, podEnv+"=pod-"+strconv.Itoa(i), podsEnv+"="+strconv.Itoa(n))
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			err := cmd.Wait()
			var rep podReport
			if err == nil {
				err = json.Unmarshal(stdout.Bytes(), &rep)
			}
			if err != nil {
				err = fmt.Errorf("pod-%d: %v\nstdout: %s\nstderr: %s", i, err, stdout.String(), stderr.String())
			}
			results <- result{rep, err}
		}()
	}
	reps := make([]podReport, 0, n)
	for range n {
		r := <-results // each pod is bounded by ctx
		if r.err != nil {
			t.Fatal(r.err)
		}
		reps = append(reps, r.rep)
	}
	return reps
}

func TestJaeger_stampedeTraces(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs Jaeger")
	}
	otlp, query := startJaeger(t)
	srv := redistest.Start(t)
	common := []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + otlp,
		"OTEL_SERVICE_NAME=" + service,
		redisEnv + "=" + srv.Addr(),
	}

	// The stampede: 3 pods of 3 callers each ask for one cold key at once.
	const pods, callers = 3, 3
	reps := runPods(t, pods, append(common, modeEnv+"=stampede", keyEnv+"=report:1", callersEnv+"="+strconv.Itoa(callers))...)
	var loads int64
	total := map[string]int{}
	for _, r := range reps {
		loads += r.Loads
		for s, n := range r.Sources {
			total[s] += n
		}
		if len(r.Errors) > 0 || r.FailedOpen > 0 {
			t.Fatalf("%s: errors %v, failed open %d", r.Pod, r.Errors, r.FailedOpen)
		}
	}
	if loads != 1 || total["loader"] != 1 || total["waited"] != pods-1 || total["coalesced"] != pods*callers-pods {
		t.Fatalf("loads %d, sources %v; want 1 load, 1 loader, %d waited, the rest coalesced", loads, total, pods-1)
	}

	// One more pod, after Redis died: it fails open.
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	fo := runPods(t, 1, append(common, modeEnv+"=failopen", keyEnv+"=report:2", callersEnv+"=1")...)[0]
	if fo.FailedOpen != 1 || fo.Sources["loader"] != 1 {
		t.Fatalf("fail-open pod: %+v, want one failed-open loader call", fo)
	}

	want := pods*callers + 1
	traces := waitTraces(t, query, want)
	if dir := os.Getenv("HERDGUARD_JAEGER_DUMP"); dir != "" {
		dumpTraces(t, query, dir)
	}
	byRoot := map[string][]*jTrace{}
	for _, tr := range traces {
		get := tr.root()
		if get == nil {
			t.Fatalf("trace %s has no resilience.get root", tr.TraceID)
		}
		byRoot[get.tag("herdguard.source")] = append(byRoot[get.tag("herdguard.source")], tr)
	}
	if len(byRoot["loader"]) != 2 || len(byRoot["waited"]) != pods-1 || len(byRoot["coalesced"]) != pods*callers-pods {
		t.Fatalf("traces by source: loader %d, waited %d, coalesced %d",
			len(byRoot["loader"]), len(byRoot["waited"]), len(byRoot["coalesced"]))
	}
	var winner, failOpen *jTrace
	for _, tr := range byRoot["loader"] {
		if tr.root().tag("herdguard.failed_open") == "true" {
			failOpen = tr
		} else {
			winner = tr
		}
	}
	if winner == nil || failOpen == nil {
		t.Fatal("want one winner and one fail-open call among the loader traces")
	}

	// The winner: the lock acquired, with a fence; the load and the
	// write-back under it.
	wantTree(t, "winner", winner, `
resilience.get pipeline=e2e source=loader failed_open=false
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
resilience.get pipeline=e2e source=waited failed_open=false
  resilience.l1 hit=false
  resilience.singleflight shared=false
    resilience.l2 db=redis hit=false
    resilience.lock outcome=waited
      resilience.lock.wait
        resilience.l2 db=redis hit=false
`, "\n")) || !strings.HasSuffix(got, "        resilience.l2 db=redis hit=true\n") {
		t.Fatalf("waiter's trace:\n%s", got)
	}
	// A coalesced caller links to the single-flight span of its pod's
	// leader, in another trace.
	co := byRoot["coalesced"][0]
	wantTree(t, "coalesced", co, `
resilience.get pipeline=e2e source=coalesced failed_open=false
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
	wantTree(t, "fail-open", failOpen, `
resilience.get pipeline=e2e source=loader failed_open=true
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

// waitTraces polls Jaeger until it holds n traces of the service.
func waitTraces(t *testing.T, query string, n int) []*jTrace {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var last []*jTrace
	for time.Now().Before(deadline) {
		resp, err := http.Get(query + "/api/traces?service=" + service + "&limit=1000&lookback=1h")
		if err == nil {
			var body struct {
				Data []*jTrace `json:"data"`
			}
			err = json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			if err == nil {
				last = body.Data
				if len(last) >= n && allEnded(last) {
					return last
				}
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("jaeger holds %d traces of %s, want %d", len(last), service, n)
	return nil
}

// allEnded reports whether every trace has its root: spans arrive in
// batches, and the root ends last.
func allEnded(trs []*jTrace) bool {
	for _, tr := range trs {
		if tr.root() == nil {
			return false
		}
	}
	return true
}

// dumpTraces writes the service's traces, as Jaeger's API returns them, to
// dir/traces.json; docs/trace-view.html draws them.
func dumpTraces(t *testing.T, query, dir string) {
	t.Helper()
	resp, err := http.Get(query + "/api/traces?service=" + service + "&limit=1000&lookback=1h")
	if err != nil {
		t.Fatalf("dump traces: %v", err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		t.Fatalf("dump traces: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "traces.json"), buf.Bytes(), 0o644); err != nil {
		t.Fatalf("dump traces: %v", err)
	}
}
