package modproxy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
)

// Module is one module of the repository.
type Module struct {
	// Path is the module path, as its go.mod declares it.
	Path string
	// Dir is the module's folder, relative to the repository root, with
	// forward slashes: "." for the root.
	Dir string
	// File is its parsed go.mod.
	File *modfile.File
}

// Modules returns the modules of the repository at root: every folder with
// a go.mod, the root first. Folders named testdata or vendor, and those
// whose name starts with "." or "_", are skipped, as the go command skips
// them.
func Modules(root string) ([]Module, error) {
	var mods []Module
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if p != root && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Name() != "go.mod" {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		f, err := modfile.Parse(p, data, nil)
		if err != nil {
			return err
		}
		if f.Module == nil {
			return fmt.Errorf("modproxy: %s declares no module", p)
		}
		rel, err := filepath.Rel(root, filepath.Dir(p))
		if err != nil {
			return err
		}
		mods = append(mods, Module{Path: f.Module.Mod.Path, Dir: filepath.ToSlash(rel), File: f})
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(mods, func(a, b Module) int { return strings.Compare(a.Dir, b.Dir) })
	if len(mods) == 0 || mods[0].Dir != "." {
		return nil, fmt.Errorf("modproxy: no go.mod at %s", root)
	}
	return mods, nil
}

// Version returns the one version at which the repository's modules
// require each other. It fails if a go.mod replaces a module (a replace is
// ignored in a dependency, so what it points at is not what a user gets),
// if two requirements name different versions (the modules are released
// together, at one version), or if none requires another.
func Version(mods []Module) (string, error) {
	ours := make(map[string]bool, len(mods))
	for _, m := range mods {
		ours[m.Path] = true
	}
	var errs []error
	version, by := "", ""
	for _, m := range mods {
		for _, r := range m.File.Replace {
			errs = append(errs, fmt.Errorf("modproxy: %s/go.mod replaces %s: a replace is ignored where the module is a dependency", m.Dir, r.Old.Path))
		}
		for _, r := range m.File.Require {
			if !ours[r.Mod.Path] {
				continue
			}
			switch {
			case version == "":
				version, by = r.Mod.Version, m.Dir
			case r.Mod.Version != version:
				errs = append(errs, fmt.Errorf("modproxy: %s/go.mod requires %s at %s, %s/go.mod at %s: the modules are released at one version", m.Dir, r.Mod.Path, r.Mod.Version, by, version))
			}
		}
	}
	if version == "" && len(errs) == 0 {
		errs = append(errs, errors.New("modproxy: no module of the repository requires another"))
	}
	if version != "" && (!semver.IsValid(version) || module.IsPseudoVersion(version) || semver.Build(version) != "") {
		errs = append(errs, fmt.Errorf("modproxy: required version %s is not a release version (vX.Y.Z)", version))
	}
	if err := errors.Join(errs...); err != nil {
		return "", err
	}
	return version, nil
}

// Tag returns the git tag of module m at version v: "v0.1.0" for the root,
// "backend/postgres/v0.1.0" for the module in backend/postgres.
func Tag(m Module, v string) string {
	if m.Dir == "." {
		return v
	}
	return path.Join(m.Dir, v)
}

// Versions returns the release versions (vX.Y.Z) of module m that the
// repository at root has tags of, in no particular order.
func Versions(root string, m Module) ([]string, error) {
	pattern := Tag(m, "v*")
	out, err := exec.Command("git", "-C", root, "tag", "--list", pattern).Output()
	if err != nil {
		return nil, fmt.Errorf("modproxy: git tag --list %s: %w", pattern, err)
	}
	var versions []string
	for _, tag := range strings.Fields(string(out)) {
		v := strings.TrimPrefix(tag, strings.TrimSuffix(pattern, "v*"))
		if semver.IsValid(v) && semver.Canonical(v) == v && semver.Prerelease(v) == "" {
			versions = append(versions, v)
		}
	}
	return versions, nil
}

// Tagged reports whether the repository at root has the tag.
func Tagged(root, tag string) (bool, error) {
	cmd := exec.Command("git", "-C", root, "tag", "--list", tag)
	out, err := cmd.Output()
	if err != nil {
		return false, fmt.Errorf("modproxy: git tag --list %s: %w", tag, err)
	}
	return slices.Contains(strings.Fields(string(out)), tag), nil
}
