package web

import (
	"os/exec"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/internal/testenv"
	"github.com/ensemble-dev/ensemble/protocol"
	"io/fs"
	"strings"
	"testing"
)

func TestFSServesTheApp(t *testing.T) {
	root := FS()
	for _, name := range []string{
		"index.html", "favicon.svg", "css/app.css",
		"js/app.js", "js/auth.js", "js/connection.js", "js/store.js", "js/dom.js",
		"js/views/sessions.js", "js/views/transcript.js", "js/views/composer.js", "js/views/header.js", "js/views/trash.js",
	} {
		if _, err := fs.Stat(root, name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	index, err := fs.ReadFile(root, "index.html")
	if err != nil {
		t.Fatal(err)
	}
	for _, hook := range []string{`id="new-session"`, `id="session-list"`, `id="composer"`, `id="send"`, `id="stop"`, `id="transcript"`, `id="conn-state"`, `src="js/app.js"`} {
		if !strings.Contains(string(index), hook) {
			t.Errorf("index.html lacks %s", hook)
		}
	}
	// Node unit tests and the package marker stay out of the binary.
	_ = fs.WalkDir(root, ".", func(p string, d fs.DirEntry, err error) error {
		if strings.HasSuffix(p, ".test.mjs") || strings.HasSuffix(p, "package.json") || strings.HasSuffix(p, ".go") {
			t.Errorf("embedded %s", p)
		}
		return nil
	})
}

// The GUI's pure modules (reducers, connection flow, token handling) have
// node:test suites; running them here keeps them in the one test command.
func TestJavaScriptModules(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Missing(t, "Node.js (for the GUI's JavaScript tests)", err)
	}
	out, err := exec.Command(node, "--test", "js/").CombinedOutput()
	if err != nil {
		t.Fatalf("node --test js/: %v\n%s", err, out)
	}
}

// Every error code the server can answer, and every failure reason a turn
// can settle with, has a plain-language sentence in the GUI (explain.js;
// its node tests check each has a next step).
func TestEveryCodeIsExplained(t *testing.T) {
	src, err := fs.ReadFile(FS(), "js/explain.js")
	if err != nil {
		t.Fatal(err)
	}
	words := []string{host.ReasonExecutionStatusUnknown, host.ReasonProviderRejected, host.ReasonProviderStateLost,
		host.ReasonDeliveryUnknown, host.ReasonProviderError, host.ReasonMaxTokens, host.ReasonRefusal, host.StopServerShutdown}
	for _, c := range protocol.Codes {
		words = append(words, string(c))
	}
	for _, w := range words {
		if !strings.Contains(string(src), "  "+w+": [") {
			t.Errorf("explain.js has no sentence for %q", w)
		}
	}
}
