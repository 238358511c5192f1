package modproxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

// Build writes, under dst, a module proxy holding every module of the
// repository at root at version: from its tag when the tag exists, from
// the working tree otherwise (untracked files included, as the go command
// would zip the folder). The zips are made by golang.org/x/mod/zip, as the
// public proxy makes them, so they are checked the same way: no file too
// large, no name that differs from another by case only, no nested
// module's files.
func Build(dst, root string, mods []Module, version string) error {
	for _, m := range mods {
		if err := add(dst, root, m, version); err != nil {
			return err
		}
	}
	return nil
}

func add(dst, root string, m Module, version string) error {
	mv := module.Version{Path: m.Path, Version: version}
	escPath, err := module.EscapePath(m.Path)
	if err != nil {
		return err
	}
	escVersion, err := module.EscapeVersion(version)
	if err != nil {
		return err
	}
	dir := filepath.Join(dst, filepath.FromSlash(escPath), "@v")
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
		"list":               []byte(version + "\n"),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}
