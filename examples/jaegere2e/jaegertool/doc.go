// Package jaegertool pins the Jaeger all-in-one binary the end-to-end test
// runs, as a Go tool of a module of its own: Jaeger's dependency graph (an
// OpenTelemetry Collector distribution) cannot share a module with the
// toolkit's newer OpenTelemetry modules. The folder's own go.work keeps
// the repository's workspace out. Build or run it from this folder:
//
//	go tool jaeger --config config.yaml
//	go build -o jaeger github.com/jaegertracing/jaeger/cmd/jaeger
package jaegertool
