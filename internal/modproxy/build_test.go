package modproxy_test

import (
	"archive/zip"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/herdguard/herdguard/internal/modproxy"
)

// A tagged version is served from its tag and listed, the version being
// prepared from the working tree and not listed, and the nested module's
// files are in its own zip only.
func TestBuild_tagFromGit_preparedFromWorkingTree(t *testing.T) {
	root := t.TempDir()
	write(t, root, ".", "module example.com/r\n\ngo 1.26\n")
	write(t, root, "sub", "module example.com/r/sub\n\ngo 1.26\n\nrequire example.com/r v0.2.0\n")
	writeFile(t, root, "r.go", "package r\n\nconst V = 1\n")
	writeFile(t, root, "sub/sub.go", "package sub\n")
	git(t, root, "init", "-q")
	git(t, root, "add", ".")
	git(t, root, "-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "-qm", "one")
	git(t, root, "tag", "v0.1.0")
	writeFile(t, root, "r.go", "package r\n\nconst V = 2\n")

	mods, err := modproxy.Modules(root)
	if err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	if err := modproxy.Build(dst, root, mods, "v0.2.0"); err != nil {
		t.Fatal(err)
	}
	list, err := os.ReadFile(filepath.Join(dst, "example.com/r/@v/list"))
	if err != nil {
		t.Fatal(err)
	}
	if string(list) != "v0.1.0\n" {
		t.Errorf("list = %q, want the tagged v0.1.0 only", list)
	}
	for version, want := range map[string]string{"v0.1.0": "const V = 1", "v0.2.0": "const V = 2"} {
		files := zipFiles(t, filepath.Join(dst, "example.com/r/@v", version+".zip"))
		if got := files["example.com/r@"+version+"/r.go"]; got != "package r\n\n"+want+"\n" {
			t.Errorf("%s: r.go = %q, want %q", version, got, want)
		}
		if _, ok := files["example.com/r@"+version+"/sub/sub.go"]; ok {
			t.Errorf("%s: the root's zip holds the nested module's sub.go", version)
		}
	}
	if files := zipFiles(t, filepath.Join(dst, "example.com/r/sub/@v/v0.2.0.zip")); files["example.com/r/sub@v0.2.0/sub.go"] == "" {
		t.Errorf("sub's zip lacks sub.go: %v", files)
	}
}

func zipFiles(t *testing.T, name string) map[string]string {
	t.Helper()
	zr, err := zip.OpenReader(name)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	files := map[string]string{}
	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		files[f.Name] = string(data)
	}
	return files
}

func writeFile(t *testing.T, root, name, data string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(root, name), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func git(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}
