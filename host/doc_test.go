package host_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The package doc maps every file to its capability; a file added, moved
// or removed without the map fails here.
func TestDocMapsEveryFile(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	mapped := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^//\t(\S+\.go)\s`).FindAllStringSubmatch(string(doc), -1) {
		mapped[m[1]] = true
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	onDisk := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		onDisk[f] = true
		if !mapped[f] && !(strings.HasPrefix(f, "ports_") && mapped["ports_*.go"]) {
			t.Errorf("%s is not in the file map of doc.go", f)
		}
	}
	for f := range mapped {
		if f != "ports_*.go" && !onDisk[f] {
			t.Errorf("doc.go maps %s, which does not exist", f)
		}
	}
}
