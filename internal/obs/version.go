package obs

import "runtime/debug"

// Scope is the pipeline's instrumentation scope: the instrumenting
// package's path, package resilience's.
const Scope = "github.com/herdguard/herdguard/resilience"

// modulePath is this module's path.
const modulePath = "github.com/herdguard/herdguard"

// Version is the instrumentation version reported with spans and metrics:
// the module's version as the build recorded it ("(devel)" in the
// module's own builds and tests).
func Version() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Path == modulePath {
			return bi.Main.Version
		}
		for _, m := range bi.Deps {
			if m.Path == modulePath {
				if m.Replace != nil && m.Replace.Version != "" {
					return m.Replace.Version
				}
				return m.Version
			}
		}
	}
	return "(devel)"
}
