// Package jaegertool pins the Jaeger all-in-one binary the end-to-end test
// runs, as a Go tool of a module of its own: Jaeger's dependency graph (an
// OpenTelemetry Collector distribution) cannot share a module with the
// toolkit's newer OpenTelemetry modules. Build or run it from this folder:
//
//	GOWORK=off go tool jaeger --config config.yaml
//	GOWORK=off go build -o jaeger github.com/jaegertracing/jaeger/cmd/jaeger
package jaegertool
