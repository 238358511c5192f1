//go:build linux

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/herdguard/herdguard/internal/redistest"
)

// TestPrometheus_serverEvaluatesEveryPanel starts a real Prometheus server
// (Debian's prometheus package; ./scripts/test installs it) that scrapes
// the example's /metrics page every second while a stampede runs and the
// other metrics appear, then evaluates every panel query of
// docs/grafana-dashboard.json through its HTTP API (/api/v1/query), with
// Grafana's variables filled in: each must return at least one series,
// carrying every label the panel's legend names. The pipeline variable's
// label_values query is asked of /api/v1/label too.
func TestPrometheus_serverEvaluatesEveryPanel(t *testing.T) {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatal("prometheus is not on PATH: install Debian's prometheus package (./scripts/test does)")
	}
	srv := redistest.Start(t)
	m, err := NewMetrics("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	p, err := NewPipeline("prom", srv.Client(), m.Provider)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	// Prometheus scrapes the page through this forwarder, which tells the
	// test when each scrape was served.
	scrapes := make(chan struct{}, 1024)
	fwd := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, err := http.Get("http://" + m.Addr + "/metrics")
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
		_, _ = io.Copy(w, resp.Body)
		select {
		case scrapes <- struct{}{}:
		default:
		}
	}))
	defer fwd.Close()
	api := startPrometheus(t, bin, strings.TrimPrefix(fwd.URL, "http://"))

	ctx := context.Background()
	waitScrapes(t, scrapes, 1)
	const callers, keys = 200, 50
	if loads := Stampede(ctx, p, callers, keys, "r1"); loads != keys+1 {
		t.Fatalf("%d loads, want %d (one per key)", loads, keys+1)
	}
	everyOtherMetric(t, ctx, srv, p)
	// A scrape requested after another has ended: when the third request
	// after the events arrives, two scrapes that saw them are stored.
	drain(scrapes)
	waitScrapes(t, scrapes, 3)

	dash := readDashboard(t, "../../docs/grafana-dashboard.json")
	vars := strings.NewReplacer(`$pipeline`, "prom", `$__rate_interval`, "1m")
	for _, pn := range dash.Panels {
		for _, tg := range pn.Targets {
			q := vars.Replace(tg.Expr)
			result := query(t, api, q)
			if len(result) == 0 {
				t.Errorf("panel %q: %s returned no series", pn.Title, q)
				continue
			}
			for _, lbl := range legendLabels(tg.LegendFormat) {
				for _, s := range result {
					if s.Metric[lbl] == "" {
						t.Errorf("panel %q: %s returned a series without %s, which its legend %q shows: %v", pn.Title, q, lbl, tg.LegendFormat, s.Metric)
					}
				}
			}
			t.Logf("panel %q: %d series from %s", pn.Title, len(result), q)
		}
	}
	for _, v := range dash.Templating.List {
		if v.Definition == "" {
			continue
		}
		mt := labelValuesRE.FindStringSubmatch(v.Definition)
		if mt == nil {
			t.Errorf("variable %q: %s is not label_values(metric, label)", v.Name, v.Definition)
			continue
		}
		if values := labelValues(t, api, mt[2], mt[1]); !slices.Contains(values, "prom") {
			t.Errorf("variable %q: %s = %v, want prom among them", v.Name, v.Definition, values)
		}
	}
}

var (
	legendRE      = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)
	labelValuesRE = regexp.MustCompile(`^label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)$`)
)

// legendLabels returns the labels a Grafana legend format names.
func legendLabels(format string) []string {
	var labels []string
	for _, m := range legendRE.FindAllStringSubmatch(format, -1) {
		labels = append(labels, m[1])
	}
	return labels
}

type dashboard struct {
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr         string `json:"expr"`
			LegendFormat string `json:"legendFormat"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

func readDashboard(t *testing.T, path string) dashboard {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(d.Panels) == 0 {
		t.Fatalf("%s has no panels", path)
	}
	return d
}

// startPrometheus runs prometheus on a free loopback port, with a
// configuration and a data folder in a temporary folder, scraping target
// every second; it returns the server's base URL once the server says it
// is ready, and stops it at the end of the test.
func startPrometheus(t *testing.T, bin, target string) string {
	t.Helper()
	dir := t.TempDir()
	config := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: herdguard
    static_configs:
      - targets: [%q]
`, target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeLoopbackAddr(t)
	cmd := exec.Command(bin,
		"--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
	)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // no server outlives a crashed test
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The reader of the server's log: it says when the server is ready,
	// keeps the log for a failure message, and ends when the server exits
	// (the cleanup below).
	ready, exited := make(chan struct{}), make(chan struct{})
	var logs strings.Builder
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			logs.WriteString(line + "\n")
			if strings.Contains(line, "Server is ready to receive web requests.") {
				close(ready)
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-exited
		_ = cmd.Wait()
	})
	select {
	case <-ready:
	case <-exited:
		t.Fatalf("prometheus exited before it was ready:\n%s", logs.String())
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		t.Fatalf("prometheus not ready after 60s:\n%s", logs.String())
	}
	return "http://" + addr
}

func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func waitScrapes(t *testing.T, scrapes <-chan struct{}, n int) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for i := range n {
		select {
		case <-scrapes:
		case <-deadline:
			t.Fatalf("Prometheus scraped %d times in 30s, want %d", i, n)
		}
	}
}

func drain(c <-chan struct{}) {
	for {
		select {
		case <-c:
		default:
			return
		}
	}
}

type vectorSample struct {
	Metric map[string]string `json:"metric"`
}

// query evaluates an instant query through /api/v1/query and returns its
// series.
func query(t *testing.T, api, q string) []vectorSample {
	t.Helper()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		} `json:"data"`
	}
	get(t, api+"/api/v1/query?"+url.Values{"query": {q}}.Encode(), &body)
	if body.Status != "success" {
		t.Fatalf("%s: %s %s", q, body.Status, body.Error)
	}
	if body.Data.ResultType != "vector" {
		t.Fatalf("%s: a %s, want a vector", q, body.Data.ResultType)
	}
	var out []vectorSample
	if err := json.Unmarshal(body.Data.Result, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// labelValues asks /api/v1/label for the values of label on the series of
// metric.
func labelValues(t *testing.T, api, label, metric string) []string {
	t.Helper()
	var body struct {
		Status string   `json:"status"`
		Data   []string `json:"data"`
	}
	get(t, api+"/api/v1/label/"+label+"/values?"+url.Values{"match[]": {metric}}.Encode(), &body)
	if body.Status != "success" {
		t.Fatalf("label values of %s on %s: %s", label, metric, body.Status)
	}
	return body.Data
}

func get(t *testing.T, u string, v any) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %s: %v\n%s", u, resp.Status, err, b)
	}
}
