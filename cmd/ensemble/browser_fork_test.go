package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// Issue 14 in the GUI: pin and session settings are canonical and live
// for every collaborator; a working directory outside the workspace root
// is refused with the reason; Fork shows on settled turns where the agent
// attests it (never for a viewer), opens the new session "Title (2)", and
// the new session appears for everyone.
func TestBrowserForkPinAndSettings(t *testing.T) {
	b := browser(t)
	dataDir := t.TempDir()
	p := startServer(t, dataDir, "--sim-rate", "5ms")
	if err := os.MkdirAll(filepath.Join(dataDir, "work", "proj"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Alice connects before the agent ever did: her ready frame cannot say
	// what it attests; the session snapshot she gets later does.
	alice := person(t, b, mintLink(t, dataDir, p.addr, "alice", "Alice", "member"))
	var created struct {
		Session struct {
			ID string `json:"id"`
		} `json:"session"`
	}
	if code := p.call(t, http.MethodPost, "/sessions", map[string]any{"title": "Plan",
		"clientSubmitId": "bf-1", "content": map[string]any{"text": "/sim words=4"}}, &created); code != http.StatusCreated {
		t.Fatalf("session.create: %d", code)
	}
	sid := created.Session.ID
	bob := person(t, b, mintLink(t, dataDir, p.addr, "bob", "Bob", "member"))
	carol := person(t, b, mintLink(t, dataDir, p.addr, "carol", "Carol", "viewer"))
	openSession(t, alice, "Alice", sid)
	openSession(t, bob, "Bob", sid)
	openSession(t, carol, "Carol", sid)
	completed := `document.querySelectorAll('#transcript .turn-status[data-outcome="completed"]').length`
	waitJS(t, alice, "the first turn completes", completed+` === 1`)
	send(t, alice, "Alice", "/sim words=3")
	waitJS(t, alice, "the second turn completes", completed+` === 2`)

	// Pin: Alice pins, Bob and Carol see it live (bar and list).
	// Alice's own bar answers from her request, so a click the page did
	// not take fails here, apart from a pin that did not reach the others.
	do(t, alice, "Alice pins the session", chromedp.WaitEnabled(chromedp.CSS(`#session-pin`)),
		chromedp.Click(chromedp.CSS(`#session-pin`)))
	waitJS(t, alice, "Alice's own bar shows the pin", `document.querySelector('#session-pin').getAttribute('aria-pressed') === 'true'`)
	pinned := `document.querySelector('#session-pin').getAttribute('aria-pressed') === 'true' &&
		!document.querySelector('#session-list [data-session-id="` + sid + `"] .session-pin').hidden`
	waitJS(t, bob, "Bob sees the pin", pinned)
	waitJS(t, carol, "Carol sees the pin", pinned)
	if !js[bool](t, carol, "the viewer's pin is disabled", `document.querySelector('#session-pin').disabled && document.querySelector('#session-settings-btn').hidden`) {
		t.Fatal("a viewer can pin or edit settings")
	}

	// Settings: outside the root is refused with the reason, inside is
	// saved and reaches Bob.
	do(t, alice, "Alice opens the settings", chromedp.Click(chromedp.CSS(`#session-settings-btn`)),
		chromedp.WaitVisible(chromedp.CSS(`#session-settings`)))
	do(t, alice, "Alice tries a directory outside the root", chromedp.SetValue(chromedp.CSS(`#settings-cwd`), "../.."),
		chromedp.Click(chromedp.CSS(`#settings-save`)), chromedp.WaitVisible(chromedp.CSS(`#settings-error`)))
	if msg := js[string](t, alice, "the refusal", `document.querySelector('#settings-error').textContent`); !strings.Contains(msg, "workspace root") {
		t.Fatalf("refusal says %q", msg)
	}
	screenshot(t, alice, "14-settings-refused")
	do(t, alice, "Alice chooses proj", chromedp.SetValue(chromedp.CSS(`#settings-cwd`), "proj"),
		chromedp.Click(chromedp.CSS(`#settings-save`)), chromedp.WaitNotVisible(chromedp.CSS(`#session-settings`)))
	waitJS(t, bob, "Bob's session has the new working directory",
		`((window.ensemble.state.open.session.settings || {}).cwd || '').endsWith('/work/proj')`)

	// Fork: members see it on both settled turns, the viewer nowhere.
	forks := `document.querySelectorAll('#transcript .turn-fork:not([hidden])').length`
	waitJS(t, alice, "Alice sees Fork on both turns", forks+` === 2`)
	if n := js[float64](t, carol, "the viewer's fork buttons", forks); n != 0 {
		t.Fatalf("the viewer sees %v fork buttons", n)
	}
	screenshot(t, alice, "15-fork-and-pin")
	do(t, alice, "Alice forks through the first turn",
		chromedp.Click(chromedp.CSS(`#transcript .turn-status[data-outcome="completed"] .turn-fork`)))
	waitJS(t, alice, "Alice is in the fork", `location.hash.includes('session=') && !location.hash.includes('`+sid+`') &&
		document.querySelector('#session-title').textContent === 'Plan (2)'`)
	waitJS(t, alice, "the fork holds the first turn only", completed+` === 1 && !document.querySelector('#transcript .turn-status:not([data-outcome])')`)
	waitJS(t, bob, "Bob sees the fork in the list", `[...document.querySelectorAll('#session-list .session-title')].some(e => e.textContent === 'Plan (2)')`)
	screenshot(t, alice, "16-forked-session")

	// The fork is independent and works: a prompt there completes.
	send(t, alice, "Alice", "/sim recall")
	waitJS(t, alice, "the fork's agent remembers the first prompt only",
		`[...document.querySelectorAll('#transcript .msg-agent')].some(e => e.textContent.includes('I remember 1 earlier prompts.'))`)

	// A turn the agent refused was never bound to an agent turn: no Fork,
	// and its status line says why on hover.
	send(t, alice, "Alice", "/sim fail")
	refused := `document.querySelector('#transcript .turn-status[data-outcome="failed"]')`
	waitJS(t, alice, "the refused turn settles", refused)
	got := js[[]any](t, alice, "the refused turn's fork state", `[`+refused+`.dataset.forkReason, `+refused+`.title,
		`+refused+`.querySelector('.turn-fork').hidden]`)
	if got[0] != "fork_point_unbound" || !strings.Contains(got[1].(string), "Fork unavailable: The agent never confirmed this turn") || got[2] != true {
		t.Fatalf("refused turn: %v", got)
	}
	screenshot(t, alice, "17-fork-hidden-on-refused-turn")
}
