package modproxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/zip"
)

// Build writes, under dst, a module proxy holding every module of the
// repository at root at version, from its tag when the tag exists, from
// the working tree otherwise (untracked files included, as the go command
// would zip the folder); and at every release version tagged before, from
// its tag, so that a release check finds its base offline. Only tagged
// versions are listed (@v/list): an untagged one is fetched by its exact
// version, and is not yet released for a tool that asks which versions
// exist (gorelease). The zips are made by golang.org/x/mod/zip, as the
// public proxy makes them, so they are checked the same way: no file too
// large, no name that differs from another by case only, no nested
// module's files.
func Build(dst, root string, mods []Module, version string) error {
	for _, m := range mods {
		tagged, err := Versions(root, m)
		if err != nil {
			return err
		}
		versions := append([]string{version}, tagged...)
		slices.SortFunc(versions, semver.Compare)
		versions = slices.Compact(versions)
		for _, v := range versions {
			if err := add(dst, root, m, v); err != nil {
				return err
			}
		}
		if err := writeList(dst, m, tagged); err != nil {
			return err
		}
	}
	return nil
}

// moduleDir returns the folder of module path's files in the proxy at dst.
func moduleDir(dst, modPath string) (string, error) {
	esc, err := module.EscapePath(modPath)
	if err != nil {
		return "", err
	}
	return filepath.Join(dst, filepath.FromSlash(esc), "@v"), nil
}

func writeList(dst string, m Module, versions []string) error {
	dir, err := moduleDir(dst, m.Path)
	if err != nil {
		return err
	}
	var list strings.Builder
	for _, v := range slices.SortedFunc(slices.Values(versions), semver.Compare) {
		list.WriteString(v + "\n")
	}
	return os.WriteFile(filepath.Join(dir, "list"), []byte(list.String()), 0o644)
}

func add(dst, root string, m Module, version string) error {
	mv := module.Version{Path: m.Path, Version: version}
	dir, err := moduleDir(dst, m.Path)
	if err != nil {
		return err
	}
	escVersion, err := module.EscapeVersion(version)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tagged, err := Tagged(root, Tag(m, version))
	if err != nil {
		return err
	}
	var zipped bytes.Buffer
	var gomod []byte
	when := time.Now().UTC()
	if tagged {
		tag := Tag(m, version)
		subdir := ""
		if m.Dir != "." {
			subdir = m.Dir
		}
		if err := zip.CreateFromVCS(&zipped, mv, root, tag, subdir); err != nil {
			return fmt.Errorf("modproxy: zip %s from tag %s: %w", m.Path, tag, err)
		}
		if gomod, err = exec.Command("git", "-C", root, "show", tag+":"+path.Join(m.Dir, "go.mod")).Output(); err != nil {
			return fmt.Errorf("modproxy: go.mod of tag %s: %w", tag, err)
		}
	} else {
		modDir := filepath.Join(root, filepath.FromSlash(m.Dir))
		if err := zip.CreateFromDir(&zipped, mv, modDir); err != nil {
			return fmt.Errorf("modproxy: zip %s from %s: %w", m.Path, modDir, err)
		}
		if gomod, err = os.ReadFile(filepath.Join(modDir, "go.mod")); err != nil {
			return err
		}
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, when})
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{
		escVersion + ".info": info,
		escVersion + ".mod":  gomod,
		escVersion + ".zip":  zipped.Bytes(),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}
