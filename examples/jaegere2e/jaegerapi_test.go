package jaegere2e

import (
	"fmt"
	"sort"
	"strings"
)

// jTrace is a trace as Jaeger's HTTP API (/api/traces) returns it.
type jTrace struct {
	TraceID   string   `json:"traceID"`
	Spans     []*jSpan `json:"spans"`
	Processes map[string]struct {
		ServiceName string `json:"serviceName"`
	} `json:"processes"`
}

// service is the name of the service that sent s.
func (tr *jTrace) service(s *jSpan) string { return tr.Processes[s.ProcessID].ServiceName }

// redisRoot reports whether the trace is rooted in a span of redisotel's:
// one Redis command ("evalsha") or a pipelined batch ("redis.pipeline ...").
func (tr *jTrace) redisRoot() bool {
	for _, s := range tr.Spans {
		if s.parent() == "" && (s.tag("db.system") == "redis" || s.tag("db.system.name") == "redis") && !strings.HasPrefix(s.OperationName, "resilience.") {
			return true
		}
	}
	return false
}

type jSpan struct {
	TraceID       string `json:"traceID"`
	SpanID        string `json:"spanID"`
	ProcessID     string `json:"processID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"`
		TraceID string `json:"traceID"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	StartTime int64 `json:"startTime"`
	Tags      []struct {
		Key   string `json:"key"`
		Value any    `json:"value"`
	} `json:"tags"`
	Logs []struct {
		Fields []struct {
			Key   string `json:"key"`
			Value any    `json:"value"`
		} `json:"fields"`
	} `json:"logs"`
}

func (s *jSpan) tag(k string) string {
	for _, t := range s.Tags {
		if t.Key == k {
			return fmt.Sprint(t.Value)
		}
	}
	return ""
}

// parent is the span's parent in its own trace, or "".
func (s *jSpan) parent() string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" && r.TraceID == s.TraceID {
			return r.SpanID
		}
	}
	return ""
}

// root is the trace's resilience.get span (the pods start no span of
// their own).
func (tr *jTrace) root() *jSpan {
	for _, s := range tr.Spans {
		if s.parent() == "" && s.OperationName == "resilience.get" {
			return s
		}
	}
	return nil
}

func (tr *jTrace) named(name string) []*jSpan {
	var out []*jSpan
	for _, s := range tr.Spans {
		if s.OperationName == name {
			out = append(out, s)
		}
	}
	return out
}

// render prints the tree under the root, children in start order, with the
// tags that tell the story.
func (tr *jTrace) render() string {
	kids := map[string][]*jSpan{}
	for _, s := range tr.Spans {
		kids[s.parent()] = append(kids[s.parent()], s)
	}
	var b strings.Builder
	var walk func(id string, depth int)
	walk = func(id string, depth int) {
		ss := kids[id]
		sort.SliceStable(ss, func(i, j int) bool { return ss[i].StartTime < ss[j].StartTime })
		for _, s := range ss {
			b.WriteString(strings.Repeat("  ", depth) + s.OperationName)
			for _, a := range []struct{ key, show string }{
				{"herdguard.pipeline", "pipeline"}, {"herdguard.source", "source"},
				{"db.system.name", "db"}, {"herdguard.cache.hit", "hit"},
				{"herdguard.singleflight.shared", "shared"}, {"herdguard.failed_open", "failed_open"},
				{"herdguard.lock.outcome", "outcome"}, {"herdguard.fail_open.reason", "reason"},
			} {
				v := s.tag(a.key)
				if a.key == "herdguard.pipeline" && strings.HasPrefix(v, "stampede-") {
					v = "stampede" // the harness names its pipeline afresh each run
				}
				if v != "" && !(a.key == "herdguard.failed_open" && s.OperationName != "resilience.get" && v == "false") {
					b.WriteString(" " + a.show + "=" + v)
				}
			}
			for _, l := range s.Logs {
				for _, f := range l.Fields {
					if f.Key == "event" {
						b.WriteString(" log=" + fmt.Sprint(f.Value))
					}
				}
			}
			b.WriteByte('\n')
			walk(s.SpanID, depth+1)
		}
	}
	walk("", 0)
	return b.String()
}
