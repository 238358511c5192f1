package modproxy_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/herdguard/herdguard/internal/modproxy"
)

// The programs a user writes against each module, built after a go get of
// the module alone.
var programs = []struct {
	module string // the module's folder
	get    string // what the user types after go get, before @version
	main   string // the program
	output string // what it prints, when it can run without servers
}{{
	module: ".",
	get:    "github.com/herdguard/herdguard",
	main: `package main

import (
	"context"
	"fmt"
	"time"

	"github.com/herdguard/herdguard/resilience"
)

func main() {
	users, err := resilience.New[string]("users").Cache(time.Minute).SingleFlight().Build()
	if err != nil {
		panic(err)
	}
	defer users.Close()
	name, err := users.Get(context.Background(), "42", func(ctx context.Context, id string) (string, error) {
		return "user " + id, nil
	})
	fmt.Println(name, err)
}
`,
	output: "user 42 <nil>\n",
}, {
	module: "backend/postgres",
	get:    "github.com/herdguard/herdguard/backend/postgres",
	main: `package main

import (
	"context"
	"os"
	"time"

	"github.com/herdguard/herdguard/backend/postgres"
	"github.com/herdguard/herdguard/resilience"
	"github.com/jackc/pgx/v5/pgxpool"
)

func main() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	pg, err := postgres.New(pool, postgres.Options{})
	if err != nil {
		panic(err)
	}
	users, err := resilience.New[string]("users").Cache(time.Minute).Backend(pg).Lock(resilience.LockSettings{}).Build()
	if err != nil {
		panic(err)
	}
	defer users.Close()
}
`,
}}

// TestInstall_goGet_outsideTheRepository does what a user does: in a new
// module outside the repository, with the workspace off and the network
// off, go get a module of the repository and build a program against it.
// The repository's modules come from a local module proxy holding the
// working tree at the version the go.mod files name; every other module
// from the machine's module cache, as a second file:// proxy. The module
// cache the go command fills is a fresh one, so that nothing of the
// repository is found there from an earlier run.
func TestInstall_goGet_outsideTheRepository(t *testing.T) {
	if testing.Short() {
		t.Skip("builds programs with the go command")
	}
	root := repoRoot(t)
	mods, err := modproxy.Modules(root)
	if err != nil {
		t.Fatal(err)
	}
	version, err := modproxy.Version(mods)
	if err != nil {
		t.Fatal(err)
	}
	checkReleasable(t, root, mods, version)

	proxy := t.TempDir()
	if err := modproxy.Build(proxy, root, mods, version); err != nil {
		t.Fatal(err)
	}
	cache := goEnv(t, "GOMODCACHE")
	env := append(withoutGoEnv(os.Environ()),
		"GOWORK=off",
		"GOPROXY="+fileURL(proxy)+","+fileURL(filepath.Join(cache, "cache", "download"))+",off",
		// -modcacherw: t.TempDir can remove the cache; -trimpath: the build
		// cache serves packages compiled from another module cache.
		"GOFLAGS=-mod=mod -modcacherw -trimpath",
		"GOMODCACHE="+t.TempDir(),
		"GONOSUMDB=github.com/herdguard",
		"GOSUMDB=off", // no checksum database without the network; the cache's modules were checked when fetched
		"GOTOOLCHAIN=local",
	)
	for _, p := range programs {
		t.Run(p.module, func(t *testing.T) {
			dir := t.TempDir()
			if strings.HasPrefix(dir, root+string(filepath.Separator)) {
				t.Fatalf("scratch module %s is inside the repository", dir)
			}
			if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(p.main), 0o644); err != nil {
				t.Fatal(err)
			}
			run(t, dir, env, "go", "mod", "init", "example.com/user")
			run(t, dir, env, "go", "get", p.get+"@"+version)
			gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
			if err != nil {
				t.Fatal(err)
			}
			if want := p.get + " " + version; !strings.Contains(string(gomod), want) {
				t.Errorf("go get %s: go.mod does not require %s:\n%s", p.get, want, gomod)
			}
			run(t, dir, env, "go", "build", "-o", "prog", ".")
			if p.output != "" {
				if got := run(t, dir, env, "./prog"); got != p.output {
					t.Errorf("program printed %q, want %q", got, p.output)
				}
			}
		})
	}
}

// checkReleasable checks what the proxy cannot: that version is one that
// will exist (a tag of every module, or the newest section of
// CHANGELOG.md, the release being prepared), and that no go.sum records
// sums of a module of the repository at a version that is not tagged (the
// working tree has no fixed sum: such a line goes stale with the next
// change).
func checkReleasable(t *testing.T, root string, mods []modproxy.Module, version string) {
	t.Helper()
	untagged := map[string]bool{}
	for _, m := range mods {
		tagged, err := modproxy.Tagged(root, modproxy.Tag(m, version))
		if err != nil {
			t.Fatal(err)
		}
		if !tagged {
			untagged[m.Path+" "+version] = true
		}
	}
	if len(untagged) > 0 {
		if next := changelogVersion(t, root); next != version {
			t.Errorf("the modules require each other at %s, which is not tagged, and the newest release in CHANGELOG.md is %q: require the version being released", version, next)
		}
	}
	for _, m := range mods {
		f, err := os.Open(filepath.Join(root, m.Dir, "go.sum"))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) == 3 && untagged[fields[0]+" "+strings.TrimSuffix(fields[1], "/go.mod")] {
				t.Errorf("%s/go.sum records %s %s, a version not tagged yet: remove the line", m.Dir, fields[0], fields[1])
			}
		}
		f.Close()
	}
}

var releaseHeading = regexp.MustCompile(`^## \[?(v[0-9]+\.[0-9]+\.[0-9]+)\]?`)

// changelogVersion returns the version of the newest release section of
// CHANGELOG.md.
func changelogVersion(t *testing.T, root string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(data)) {
		if m := releaseHeading.FindStringSubmatch(line); m != nil {
			return m[1]
		}
	}
	return ""
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func goEnv(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		t.Fatalf("go env %s: %v", name, err)
	}
	return strings.TrimSpace(string(out))
}

// withoutGoEnv drops the go command's settings of this environment, so
// that the user's run sees only those the test gives.
func withoutGoEnv(env []string) []string {
	var kept []string
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "GOWORK", "GOPROXY", "GOFLAGS", "GOMODCACHE", "GONOSUMDB", "GONOSUMCHECK", "GOSUMDB",
			"GOPRIVATE", "GONOPROXY", "GOINSECURE", "GOTOOLCHAIN":
			continue
		}
		kept = append(kept, kv)
	}
	return kept
}

func fileURL(dir string) string {
	return "file://" + filepath.ToSlash(dir)
}

// run runs a command in dir and returns its standard output; it fails the
// test with the command's output if the command fails.
func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env = dir, env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	out, err := cmd.Output()
	t.Logf("%s %s: %.1fs", name, strings.Join(args, " "), time.Since(start).Seconds())
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}
