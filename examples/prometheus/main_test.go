package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/herdguard/herdguard/internal/redistest"
	"github.com/herdguard/herdguard/internal/rkey"
	"github.com/herdguard/herdguard/resilience"
)

func TestMain(m *testing.M) {
	// The fail-open check kills Redis under a live client: go-redis then
	// redials in the background, sleeping a second between tries, and its
	// goroutine notices the client's Close only when it wakes. It ends on
	// its own; on a slow machine goleak may look before it does.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// series is one sample of the scrape: its metric name, labels and value.
type series struct {
	name   string
	labels map[string]string
	value  float64
}

var labelRE = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

// scrape reads the /metrics page in the text format.
func scrape(t *testing.T, addr string) []series {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /metrics: %s\n%s", resp.Status, b)
	}
	var out []series
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s := series{labels: map[string]string{}}
		rest := line
		if i := strings.IndexByte(line, '{'); i >= 0 {
			j := strings.LastIndexByte(line, '}')
			s.name = line[:i]
			for _, m := range labelRE.FindAllStringSubmatch(line[i+1:j], -1) {
				s.labels[m[1]] = m[2]
			}
			rest = strings.TrimSpace(line[j+1:])
		} else {
			s.name, rest, _ = strings.Cut(line, " ")
		}
		v, err := strconv.ParseFloat(strings.Fields(rest)[0], 64)
		if err != nil {
			t.Fatalf("scrape line %q: %v", line, err)
		}
		s.value = v
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// sum adds the values of the samples of name whose labels include want.
func sum(ss []series, name string, want map[string]string) (total float64, found bool) {
	for _, s := range ss {
		if s.name != name {
			continue
		}
		ok := true
		for k, v := range want {
			ok = ok && s.labels[k] == v
		}
		if ok {
			total += s.value
			found = true
		}
	}
	return total, found
}

// TestPrometheus_stampedeCountersAndDashboard runs a stampede (one cold key
// for 200 callers, then a burst of 50 cold keys) against a real Redis while
// the pipeline's metrics are served, checks the counters on the page, then
// makes every other metric appear (a corrupt entry, failing loads that
// open the loader breaker and fall back, a fail-open with Redis killed)
// and checks that every metric and label the Grafana dashboard queries is
// on the page.
func TestPrometheus_stampedeCountersAndDashboard(t *testing.T) {
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
	ctx := context.Background()

	const callers, keys = 200, 50
	if loads := Stampede(ctx, p, callers, keys, "r1"); loads != keys+1 {
		t.Fatalf("%d loads, want %d (one per key)", loads, keys+1)
	}
	ss := scrape(t, m.Addr)
	pl := map[string]string{"herdguard_pipeline": "prom"}
	with := func(k, v string) map[string]string { return map[string]string{"herdguard_pipeline": "prom", k: v} }
	checks := []struct {
		what string
		name string
		lbl  map[string]string
		want float64
	}{
		{"calls", "herdguard_calls_total", pl, callers + keys},
		{"calls served by the loader", "herdguard_calls_total", with("herdguard_source", "loader"), keys + 1},
		{"calls failed open", "herdguard_calls_total", with("herdguard_failed_open", "true"), 0},
		{"loads", "herdguard_loader_calls_total", with("herdguard_outcome", "ok"), keys + 1},
		{"loads timed", "herdguard_loader_duration_seconds_count", pl, keys + 1},
		{"locks acquired", "herdguard_lock_wait_duration_seconds_count", with("herdguard_lock_outcome", "acquired"), keys + 1},
	}
	for _, c := range checks {
		if got, _ := sum(ss, c.name, c.lbl); got != c.want {
			t.Errorf("%s: %s%v = %v, want %v", c.what, c.name, c.lbl, got, c.want)
		}
	}
	co, _ := sum(ss, "herdguard_calls_total", with("herdguard_source", "coalesced"))
	l1, _ := sum(ss, "herdguard_calls_total", with("herdguard_source", "l1"))
	if co+l1 != callers-1 || co == 0 {
		t.Errorf("coalesced %v + l1 %v, want %d, mostly coalesced", co, l1, callers-1)
	}
	if _, found := sum(ss, "herdguard_fail_opens_total", nil); found {
		t.Error("fail-opens counted with Redis up")
	}
	if _, found := sum(ss, "herdguard_loader_duplicates_total", nil); found {
		t.Error("duplicate loads counted in a stampede on a healthy Redis")
	}

	everyOtherMetric(t, ctx, srv, p)
	ss = scrape(t, m.Addr)
	for _, c := range []struct {
		what string
		name string
		lbl  map[string]string
		want float64
	}{
		{"corrupt entries", "herdguard_cache_corrupt_total", with("herdguard_tier", "l2"), 1},
		{"fallbacks to the default", "herdguard_fallbacks_total", with("herdguard_source", "default"), 3},
		{"fallbacks on the open breaker", "herdguard_fallbacks_total", with("herdguard_reason", "breaker_open"), 1},
		{"loader breaker open", "herdguard_breaker_state", with("herdguard_breaker_name", "prom"), 2},
		{"fail-opens", "herdguard_fail_opens_total", with("herdguard_reason", "l2_get:redis_error"), 1},
		{"duplicate loads", "herdguard_loader_duplicates_total", with("herdguard_reason", "fail_open"), 1},
	} {
		if got, _ := sum(ss, c.name, c.lbl); got != c.want {
			t.Errorf("%s: %s%v = %v, want %v", c.what, c.name, c.lbl, got, c.want)
		}
	}
	checkDashboard(t, "../../docs/grafana-dashboard.json", ss)
}

// everyOtherMetric makes the metrics a stampede leaves out appear: a
// corrupt entry in Redis, failing loads that open the loader's breaker and
// fall back to the default, and a fail-open with Redis killed.
func everyOtherMetric(t *testing.T, ctx context.Context, srv *redistest.Server, p *resilience.Pipeline[string]) {
	t.Helper()
	// A corrupt entry in Redis: bytes that do not decode, fresh.
	ks, err := rkey.New(rkey.DefaultPrefix, "prom")
	if err != nil {
		t.Fatal(err)
	}
	exp := strconv.FormatInt(time.Now().Add(time.Minute).UnixMilli(), 10)
	if err := srv.Client().HSet(ctx, ks.Value("corrupt"), rkey.FieldData, "not an envelope", rkey.FieldFence, "1", rkey.FieldExpires, exp).Err(); err != nil {
		t.Fatal(err)
	}
	ok := func(context.Context, string) (string, error) { return "v", nil }
	if v, err := p.Get(ctx, "corrupt", ok); err != nil || v != "v" {
		t.Fatalf("Get of a corrupt entry = %q, %v; want the loaded v", v, err)
	}
	// Two failing loads: the default answers, and the loader's breaker
	// (two failures) opens.
	for _, k := range []string{"fail-1", "fail-2"} {
		v, err := p.Get(ctx, k, func(context.Context, string) (string, error) { return "", errors.New("db down") })
		if err != nil || v != "unknown" {
			t.Fatalf("Get with a failing loader = %q, %v; want the default", v, err)
		}
	}
	// Redis killed: the next call fails open (and, the loader's breaker
	// being open, gets the default: a third fallback).
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Get(ctx, "after-kill", ok); err != nil {
		t.Fatal(err)
	}
}

var (
	// metricRE finds a metric name in a query: an identifier followed by
	// a selector, or label_values' first argument.
	metricRE = regexp.MustCompile(`\b(herdguard_[a-z_]+)\s*\{|label_values\(\s*(herdguard_[a-z_]+)`)
	identRE  = regexp.MustCompile(`\bherdguard_[a-z_]+\b`)
)

// checkDashboard fails unless every metric the dashboard's queries name is
// a metric of the scrape and every other herdguard_ name in them is one of
// its labels, and each panel queries at least one metric.
func checkDashboard(t *testing.T, path string, ss []series) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	metrics, labels := map[string]bool{}, map[string]bool{}
	for _, s := range ss {
		metrics[s.name] = true
		for k := range s.labels {
			labels[k] = true
		}
	}
	queries := map[string][]string{}
	for _, pn := range dash.Panels {
		for _, tg := range pn.Targets {
			queries[pn.Title] = append(queries[pn.Title], tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		if v.Definition != "" {
			queries["variable"] = append(queries["variable"], v.Definition)
		}
	}
	if len(dash.Panels) == 0 {
		t.Fatal("the dashboard has no panels")
	}
	for title, qs := range queries {
		named := 0
		for _, q := range qs {
			inQuery := map[string]bool{}
			for _, m := range metricRE.FindAllStringSubmatch(q, -1) {
				name := m[1] + m[2]
				inQuery[name] = true
				named++
				if !metrics[name] {
					t.Errorf("panel %q queries %s, which the scrape does not have", title, name)
				}
			}
			for _, id := range identRE.FindAllString(q, -1) {
				if !inQuery[id] && !labels[id] {
					t.Errorf("panel %q uses the label %s, which no series of the scrape has", title, id)
				}
			}
		}
		if named == 0 {
			t.Errorf("panel %q queries no herdguard metric", title)
		}
	}
}
