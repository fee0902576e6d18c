//go:build ignore

// Modzip writes a Go module proxy, in the layout GOPROXY=file://DIR reads,
// serving modules of this repository at one version, made from the working
// tree: for each module folder given, DIR/<module path>/@v/ gets list,
// VERSION.info, VERSION.mod and VERSION.zip. The zip holds the files git
// knows in that folder (tracked, or untracked and not ignored), less nested
// modules and vendor folders, as "<module path>@<version>/<file>".
//
//	go run .ci/modzip.go -out DIR -version v0.1.0 . expsetprom
//
// It uses the standard library only, so CI needs nothing else to run it.
package main

import (
	"archive/zip"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

func main() {
	out := flag.String("out", "", "proxy folder to write")
	version := flag.String("version", "", "version to serve the modules at, like v0.1.0")
	flag.Parse()
	if *out == "" || !regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+$`).MatchString(*version) || flag.NArg() == 0 {
		log.Fatal("usage: go run .ci/modzip.go -out DIR -version vX.Y.Z MODULE_DIR...")
	}
	files, err := gitFiles()
	if err != nil {
		log.Fatal(err)
	}
	for _, dir := range flag.Args() {
		if err := writeModule(*out, *version, path.Clean(filepath.ToSlash(dir)), files); err != nil {
			log.Fatalf("%s: %v", dir, err)
		}
	}
}

// gitFiles lists the working tree's files that git tracks or would add.
func gitFiles() ([]string, error) {
	b, err := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files: %w", err)
	}
	var files []string
	for _, f := range strings.Split(string(b), "\x00") {
		if st, err := os.Lstat(f); f != "" && err == nil && st.Mode().IsRegular() {
			files = append(files, f)
		}
	}
	sort.Strings(files)
	return files, nil
}

// modulePath reads the module path from a go.mod file.
func modulePath(gomod []byte) (string, error) {
	m := regexp.MustCompile(`(?m)^module\s+"?([^"\s]+)"?\s*$`).FindSubmatch(gomod)
	if m == nil {
		return "", fmt.Errorf("no module line in go.mod")
	}
	return string(m[1]), nil
}

// writeModule writes the proxy files of the module in dir.
func writeModule(out, version, dir string, files []string) error {
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return err
	}
	mod, err := modulePath(gomod)
	if err != nil {
		return err
	}
	if strings.ToLower(mod) != mod {
		return fmt.Errorf("module path %q has upper-case letters: escape them first", mod)
	}
	// Folders holding another module's go.mod belong to that module.
	prefix := ""
	if dir != "." {
		prefix = dir + "/"
	}
	var nested []string
	for _, f := range files {
		if rel, ok := strings.CutPrefix(f, prefix); ok && path.Base(rel) == "go.mod" && rel != "go.mod" {
			nested = append(nested, path.Dir(rel)+"/")
		}
	}
	var members []string
	for _, f := range files {
		rel, ok := strings.CutPrefix(f, prefix)
		if !ok || strings.HasPrefix(rel, "vendor/") || strings.Contains(rel, "/vendor/") {
			continue
		}
		if !hasAnyPrefix(rel, nested) {
			members = append(members, rel)
		}
	}

	at := filepath.Join(out, filepath.FromSlash(mod), "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		return err
	}
	zf, err := os.Create(filepath.Join(at, version+".zip"))
	if err != nil {
		return err
	}
	zw := zip.NewWriter(zf)
	for _, rel := range members {
		w, err := zw.Create(mod + "@" + version + "/" + rel)
		if err != nil {
			return err
		}
		src, err := os.Open(filepath.Join(dir, filepath.FromSlash(rel)))
		if err != nil {
			return err
		}
		_, err = io.Copy(w, src)
		src.Close()
		if err != nil {
			return err
		}
	}
	if err := zw.Close(); err != nil {
		return err
	}
	if err := zf.Close(); err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{
		version + ".mod":  gomod,
		version + ".info": info,
		"list":            []byte(version + "\n"),
	} {
		if err := os.WriteFile(filepath.Join(at, name), data, 0o644); err != nil {
			return err
		}
	}
	fmt.Printf("%s@%s: %d files\n", mod, version, len(members))
	return nil
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
