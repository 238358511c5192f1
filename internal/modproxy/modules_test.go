package modproxy_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/herdguard/herdguard/internal/modproxy"
)

func TestVersion(t *testing.T) {
	const root = "module example.com/r\n\ngo 1.26\n"
	tests := []struct {
		name    string
		sub     string // go.mod of sub, a module that may require the root
		other   string // go.mod of other
		want    string
		wantErr string
	}{
		{"one version", "require example.com/r v0.1.0", "require example.com/r v0.1.0", "v0.1.0", ""},
		{"a replace", "require example.com/r v0.1.0\nreplace example.com/r => ../", "", "", "sub/go.mod replaces example.com/r"},
		{"two versions", "require example.com/r v0.1.0", "require example.com/r v0.2.0", "", "released at one version"},
		{"a pseudo-version", "require example.com/r v0.0.0-20260101000000-abcdefabcdef", "", "", "not a release version"},
		{"no requirement", "", "", "", "no module of the repository requires another"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			write(t, dir, ".", root)
			write(t, dir, "sub", "module example.com/r/sub\n\ngo 1.26\n\n"+tt.sub+"\n")
			write(t, dir, "other", "module example.com/r/other\n\ngo 1.26\n\n"+tt.other+"\n")
			write(t, dir, "testdata/skipped", "module example.com/r/skipped\n\nrequire example.com/r v9.0.0\n")
			mods, err := modproxy.Modules(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(mods) != 3 || mods[0].Dir != "." || mods[0].Path != "example.com/r" {
				t.Fatalf("Modules = %+v, want the root first and three modules", mods)
			}
			got, err := modproxy.Version(mods)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("Version error = %v, want one with %q", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("Version = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestTag(t *testing.T) {
	for dir, want := range map[string]string{".": "v0.1.0", "backend/postgres": "backend/postgres/v0.1.0"} {
		if got := modproxy.Tag(modproxy.Module{Dir: dir}, "v0.1.0"); got != want {
			t.Errorf("Tag(%s) = %q, want %q", dir, got, want)
		}
	}
}

func write(t *testing.T, root, dir, gomod string) {
	t.Helper()
	d := filepath.Join(root, dir)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "go.mod"), []byte(gomod), 0o644); err != nil {
		t.Fatal(err)
	}
}
