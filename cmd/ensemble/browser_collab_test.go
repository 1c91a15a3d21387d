package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Browser tests of issue 15: several people (each in a browser context of
// their own, as separate browsers would be) on one session.

// screenshotDir is where the browser tests save the main views:
// ENSEMBLE_SCREENSHOT_DIR, or a temp dir that is kept and logged.
var screenshotDir = sync.OnceValue(func() string {
	if d := os.Getenv("ENSEMBLE_SCREENSHOT_DIR"); d != "" {
		_ = os.MkdirAll(d, 0o755)
		return d
	}
	d, err := os.MkdirTemp("", "ensemble-screenshots-")
	if err != nil {
		return ""
	}
	return d
})

func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := screenshotDir()
	if dir == "" {
		return
	}
	png := get(t, ctx, "screenshot "+name, chromedp.CaptureScreenshot())
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Errorf("save screenshot: %v", err)
		return
	}
	t.Logf("screenshot: %s", path)
}

// person opens a sign-in link in a browser context of its own.
func person(t *testing.T, b context.Context, link string) context.Context {
	t.Helper()
	ctx, cancel := chromedp.NewContext(b, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("open a browser context: %v", err)
	}
	do(t, ctx, "open the sign-in link",
		chromedp.Navigate(link),
		chromedp.WaitVisible(chromedp.CSS(`#conn-state[data-state="connected"]`)))
	return ctx
}

// waitJS waits until a JavaScript expression is truthy.
func waitJS(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := chromedp.Run(wctx, chromedp.Poll[chromedp.Void](expr)); err != nil {
		t.Fatalf("%s: %v\nthe page's client state: %s", what, err, clientState(ctx))
	}
}

// clientState is what a failed wait needs to tell a lost event from a
// late paint: the connection's subscriptions and the open session as the
// client holds them (window.ensemble, app.js).
func clientState(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => {
		const e = window.ensemble;
		if (!e) return "no window.ensemble";
		const subs = [...e.conn.subsByName.values()].map(s => ({name: s.name, epoch: s.epoch, seq: s.seq, syncing: !!s.syncing, buffered: (s.buffer || []).length}));
		const o = e.state.open;
		const open = o && {id: o.id, loaded: o.loaded, error: o.error && String(o.error.message || o.error),
			session: o.session && {pinned: o.session.pinned, updatedAt: o.session.updatedAt, activeTurnId: o.session.activeTurnId},
			queue: o.queue && {revision: o.queue.revision, entries: (o.queue.entries || []).map(q => q.state + ":" + ((q.content || {}).text || ""))},
			turns: [...o.turns.values()].map(t => t.id + ":" + t.phase + ":" + (t.outcome || ""))};
		return JSON.stringify({ready: e.conn.ready, subs, open, sessions: [...e.state.sessions.values()].map(s => s.id + (s.pinned ? ":pinned" : ""))});
	})()`))
	if err != nil {
		return "unreadable: " + err.Error()
	}
	return v
}

func js[T any](t *testing.T, ctx context.Context, what, expr string) T {
	t.Helper()
	return get(t, ctx, what, chromedp.Evaluate[T](expr))
}

func mintLink(t *testing.T, dataDir, addr, sub, name, role string) string {
	t.Helper()
	out, err := exec.Command(ensembleBinary(t), "token", "--data-dir", dataDir, "--addr", addr,
		"--sub", sub, "--name", name, "--role", role, "--workspace", "default").Output()
	if err != nil {
		t.Fatalf("ensemble token: %v", err)
	}
	return strings.TrimSpace(string(out))
}

func openSession(t *testing.T, ctx context.Context, who, sessionID string) {
	t.Helper()
	sel := `#session-list [data-session-id="` + sessionID + `"]`
	do(t, ctx, who+" opens the session", chromedp.WaitVisible(chromedp.CSS(sel)), chromedp.Click(chromedp.CSS(sel)),
		chromedp.WaitVisible(chromedp.CSS(`#session-bar`)))
}

func send(t *testing.T, ctx context.Context, who, text string) {
	t.Helper()
	do(t, ctx, who+" sends "+firstLine(text), setComposer(text), chromedp.Click(chromedp.CSS(`#send`)))
}

// setComposer puts text in the message box as typing would (input event).
func setComposer(text string) chromedp.Action[chromedp.Void] {
	q, _ := json.Marshal(text)
	return chromedp.Evaluate[chromedp.Void](`(() => { const ta = document.querySelector('#composer textarea');
		ta.value = ` + string(q) + `; ta.dispatchEvent(new Event('input', { bubbles: true })); })()`)
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	if len(l) > 40 {
		l = l[:40] + "…"
	}
	return l
}

// presenceIDs lists the user ids of the avatars in the session bar.
const presenceIDs = `[...document.querySelectorAll('#session-presence [data-user-id]')].map(e => e.dataset.userId).sort().join(',')`

func TestBrowserCollaboration(t *testing.T) {
	b := browser(t)
	dataDir := t.TempDir()
	p := startServer(t, dataDir, "--sim-rate", "5ms")
	alice := person(t, b, mintLink(t, dataDir, p.addr, "alice", "Alice", "member"))
	bob := person(t, b, mintLink(t, dataDir, p.addr, "bob", "Bob", "member"))
	carol := person(t, b, mintLink(t, dataDir, p.addr, "carol", "Carol", "viewer"))

	// The sim agent's hints show, because the server runs the sim agent.
	waitJS(t, alice, "sim hints on the welcome page", `document.querySelectorAll('#welcome .hint-chip').length >= 5`)
	screenshot(t, alice, "01-welcome")

	do(t, alice, "create a session", chromedp.Click(chromedp.CSS(`#new-session`)),
		chromedp.WaitVisible(chromedp.CSS(`#session-list [data-session-id]`)))
	sid := js[string](t, alice, "session id", `document.querySelector('#session-list [data-session-id]').dataset.sessionId`)
	openSession(t, bob, "Bob", sid)
	openSession(t, carol, "Carol", sid)

	// Presence: everyone sees everyone, with avatars and "N watching".
	for name, ctx := range map[string]context.Context{"Alice": alice, "Bob": bob, "Carol": carol} {
		waitJS(t, ctx, name+" sees three watchers", presenceIDs+` === 'alice,bob,carol'`)
	}
	if got := js[string](t, alice, "watching", `document.querySelector('#session-presence .presence-count').textContent`); got != "3 watching" {
		t.Fatalf("presence count %q", got)
	}
	// The session list says who watches each session (workspace presence).
	waitJS(t, alice, "the session list counts watchers",
		`document.querySelector('#session-list [data-session-id="`+sid+`"] .session-watching').textContent === '3 watching'`)

	// Typing: Bob types, Alice sees it; it stops when Bob stops.
	do(t, bob, "Bob types", chromedp.Click(chromedp.CSS(`#composer textarea`)), chromedp.KeyEvent("hel"))
	waitJS(t, alice, "Alice sees Bob typing", `document.querySelector('#typing').textContent === 'Bob is typing…' && !document.querySelector('#typing').hidden`)
	screenshot(t, alice, "02-presence-typing")
	do(t, bob, "Bob clears the box", setComposer(""))

	// Names on prompts and approvals; the viewer's controls are disabled
	// with the reason.
	send(t, bob, "Bob", "/sim permission")
	pending := `document.querySelector('#transcript .interaction[data-state="pending"]')`
	waitJS(t, alice, "the approval reaches Alice", pending)
	if who := js[string](t, alice, "author of Bob's prompt", `[...document.querySelectorAll('#transcript .msg-user .author')].map(e => e.textContent).join(',')`); who != "Bob" {
		t.Fatalf("Bob's prompt is labelled %q in Alice's tab", who)
	}
	waitJS(t, carol, "the approval reaches Carol", pending)
	viewer := js[[]any](t, carol, "the viewer's approval", `(() => {
		const c = document.querySelector('#transcript .interaction');
		return [[...c.querySelectorAll('.interaction-options button')].every(b => b.disabled),
			c.querySelector('.interaction-why').textContent,
			document.querySelector('#composer textarea').disabled,
			document.querySelector('#composer textarea').title,
			document.querySelector('#new-session').disabled]
	})()`)
	if viewer[0] != true || !strings.Contains(viewer[1].(string), "Viewers can watch") || viewer[2] != true ||
		!strings.Contains(viewer[3].(string), "Viewers") || viewer[4] != true {
		t.Fatalf("the viewer's controls must be disabled with a reason: %v", viewer)
	}
	screenshot(t, carol, "03-viewer-approval")
	do(t, alice, "Alice allows", chromedp.Click(chromedp.CSS(`#transcript .interaction button[data-option-id="allow"]`)))
	answered := `[...document.querySelectorAll('#transcript .interaction')].some(c => c.dataset.answeredBy === 'Alice' && /Answered by Alice/.test(c.querySelector('.interaction-status').textContent))`
	waitJS(t, bob, "Bob sees Alice's answer", answered)
	waitJS(t, bob, "the turn completes", `document.querySelector('#transcript .turn-status[data-outcome="completed"]')`)

	// Stops record who: Alice starts, Bob stops, both see "Stopped by Bob".
	send(t, alice, "Alice", "/sim hang")
	do(t, bob, "Bob stops", chromedp.WaitVisible(chromedp.CSS(`#stop`)), chromedp.Click(chromedp.CSS(`#stop`)))
	stopped := `[...document.querySelectorAll('#transcript .turn-status[data-outcome="canceled"] .turn-label')].some(e => e.textContent === 'Stopped by Bob')`
	waitJS(t, alice, "Alice sees who stopped it", stopped)
	waitJS(t, bob, "Bob sees that he stopped it", `[...document.querySelectorAll('#transcript .turn-status[data-outcome="canceled"] .turn-label')].some(e => e.textContent === 'Stopped by you')`)

	// Esc stops too (for someone who may stop).
	send(t, alice, "Alice", "/sim hang")
	do(t, alice, "Alice presses Esc", chromedp.WaitVisible(chromedp.CSS(`#stop`)), chromedp.KeyEvent("\x1b"))
	waitJS(t, bob, "Esc stopped it", `[...document.querySelectorAll('#transcript .turn-status[data-outcome="canceled"] .turn-label')].some(e => e.textContent === 'Stopped by Alice')`)

	// Approval history survives a reload, with who answered.
	do(t, bob, "Bob reloads", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(`#conn-state[data-state="connected"]`)))
	waitJS(t, bob, "the answered approval is still there after reload", answered)
	waitJS(t, bob, "names after reload", `[...document.querySelectorAll('#transcript .turn-status .turn-label')].some(e => e.textContent === 'Stopped by you')`)

	// Rendered output: markdown, highlighted code with copy, a diff in the
	// tool card and in the approval, a live plan checklist.
	send(t, alice, "Alice", "/sim markdown diff checklist")
	waitJS(t, alice, "the diff approval", `document.querySelector('#transcript .interaction[data-state="pending"] .diff')`)
	approval := js[[]string](t, alice, "the approval's diff", `(() => {
		const c = document.querySelector('#transcript .interaction[data-state="pending"]');
		return [c.querySelector('.diff').dataset.path, [...c.querySelectorAll('.diff-add .diff-text')].map(e => e.textContent).join('|'),
			[...c.querySelectorAll('.diff-del .diff-text')].map(e => e.textContent).join('|')];
	})()`)
	if approval[0] != "config.json" || !strings.Contains(approval[1], `"db": "postgres"`) || !strings.Contains(approval[2], `"db": "sqlite"`) {
		t.Fatalf("the approval must show the edit as a diff: %q", approval)
	}
	screenshot(t, alice, "04-diff-approval")
	do(t, alice, "Alice allows the edit", chromedp.Click(chromedp.CSS(`#transcript .interaction[data-state="pending"] button[data-option-id="allow"]`)))
	waitJS(t, alice, "the rich turn completes", `document.querySelectorAll('#transcript .turn-status[data-outcome="completed"]').length >= 2`)
	dom := js[map[string]any](t, alice, "rendered output", `(() => {
		const md = [...document.querySelectorAll('#transcript .msg-agent .markdown')].find(e => e.querySelector('h2'));
		const plans = document.querySelectorAll('#transcript .msg-plan');
		const plan = plans[plans.length - 1];
		const tool = [...document.querySelectorAll('#transcript .msg-tool')].find(e => e.querySelector('.tool-diffs .diff'));
		return {
			h2: md ? md.querySelector('h2').textContent : '',
			strong: md ? md.querySelectorAll('strong').length : 0,
			li: md ? md.querySelectorAll('ul > li').length : 0,
			table: md ? md.querySelectorAll('table tr').length : 0,
			quote: md ? md.querySelectorAll('blockquote').length : 0,
			link: md && md.querySelector('a') ? [md.querySelector('a').href, md.querySelector('a').target, md.querySelector('a').rel].join(' ') : '',
			codeLang: md && md.querySelector('.code-block') ? md.querySelector('.code-block').dataset.lang : '',
			highlighted: md ? md.querySelectorAll('.code-block code.hljs span').length : 0,
			copy: md ? md.querySelectorAll('.code-block .code-copy').length : 0,
			scripts: document.querySelectorAll('#transcript script').length,
			plans: plans.length,
			planItems: plan ? [...plan.querySelectorAll('.plan-item')].map(e => e.dataset.status + ':' + e.querySelector('.plan-text').textContent).join('|') : '',
			planProgress: plan ? plan.querySelector('.plan-progress').textContent : '',
			toolDiff: tool ? tool.querySelector('.diff').dataset.path : '',
			toolAdds: tool ? tool.querySelectorAll('.diff-add').length : 0,
		};
	})()`)
	want := map[string]any{"h2": "Simulated summary", "strong": 1.0, "li": 2.0, "table": 3.0, "quote": 1.0,
		"codeLang": "go", "copy": 1.0, "scripts": 0.0, "plans": 1.0,
		"planItems":    "completed:Read config.json|completed:Switch the database host|completed:Run the tests",
		"planProgress": "3 of 3 done", "toolDiff": "main.go"}
	for k, v := range want {
		if dom[k] != v {
			t.Errorf("rendered %s = %v, want %v (all: %v)", k, dom[k], v, dom)
		}
	}
	if !strings.HasPrefix(dom["link"].(string), "https://agentclientprotocol.com/ _blank noopener") ||
		dom["highlighted"].(float64) < 2 || dom["toolAdds"].(float64) < 2 {
		t.Errorf("links open safely, code is highlighted, the tool card shows added lines: %v", dom)
	}
	do(t, alice, "copy the code", chromedp.Click(chromedp.CSS(`#transcript .code-copy`)))
	waitJS(t, alice, "copy reports success", `document.querySelector('#transcript .code-copy').dataset.copied === 'true'`)
	screenshot(t, alice, "05-rendered-output")

	// A 100 KiB prompt goes through (over HTTP: it exceeds a frame).
	big := strings.Repeat("0123456789abcdef", 100*1024/16)
	send(t, alice, "Alice", big)
	waitJS(t, bob, "Bob gets the 100 KiB prompt",
		`[...document.querySelectorAll('#transcript .msg-user .msg-body')].some(e => e.textContent.length === `+itoa(len(big))+`)`)
	waitJS(t, alice, "and its turn completes", `document.querySelectorAll('#transcript .turn-status[data-outcome="completed"]').length >= 3`)
	if errText := js[string](t, alice, "composer error", `document.querySelector('#composer-status').hidden ? '' : document.querySelector('#composer-status').textContent`); errText != "" {
		t.Fatalf("a 100 KiB prompt left an error: %q", errText)
	}
	// Over the limit is refused before sending, with the reason.
	send(t, alice, "Alice", strings.Repeat("x", 300*1024))
	waitJS(t, alice, "the size is explained", `/limit is 256 KiB/.test(document.querySelector('#composer-status').textContent)`)
	do(t, alice, "clear", setComposer(""))

	// Carol leaves: the others see it.
	if err := chromedp.Cancel(carol); err != nil { // Carol closes her browser
		t.Fatalf("close Carol's browser: %v", err)
	}
	waitJS(t, alice, "Carol's avatar goes", presenceIDs+` === 'alice,bob'`)

	// The server stops: a banner, no stale "working"/Stop; it comes back:
	// the banner and stale errors clear.
	send(t, bob, "Bob", "/sim hang")
	waitJS(t, alice, "the hanging turn runs", `!document.querySelector('#stop').hidden`)
	p.kill()
	<-p.done
	waitJS(t, alice, "the offline banner", `!document.querySelector('#offline-banner').hidden &&
		/Live updates paused — reconnecting/.test(document.querySelector('#offline-banner').textContent)`)
	// The banner is set in the close handler, the rest in the next render
	// (an animation frame later, or 100 ms in a hidden tab), and the poll
	// above may run first in that frame: give the render its frame.
	waitJS(t, alice, "the offline render", `document.querySelector('#stop').hidden &&
		!document.querySelector('#transcript .turn-status[data-active="true"]')`)
	offline := js[[]any](t, alice, "offline state", `[document.querySelector('#stop').hidden, document.querySelector('#session-live').hidden,
		[...document.querySelectorAll('#transcript .turn-status[data-active="true"]')].length,
		document.querySelectorAll('#session-list .live-dot.on').length,
		document.querySelectorAll('#session-presence [data-user-id]').length + document.querySelectorAll('#session-list .session-watching:not([hidden])').length]`)
	if offline[0] != true || offline[1] != true || offline[2] != 0.0 || offline[3] != 0.0 || offline[4] != 0.0 {
		t.Fatalf("offline, nothing may claim the agent is working or who is here: %v", offline)
	}
	screenshot(t, alice, "06-offline")
	back := startServer(t, dataDir, "--sim-rate", "5ms", "--addr", p.addr)
	_ = back
	waitJS(t, alice, "the banner clears once the server is back", `document.querySelector('#offline-banner').hidden &&
		document.querySelector('#conn-state').dataset.state === 'connected'`)
	waitJS(t, alice, "presence is back", presenceIDs+` === 'alice,bob'`)
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// The sign-in page takes a link pasted into the same tab (only the hash
// changes, so nothing reloads).
func TestBrowserSignInReactsToHashChange(t *testing.T) {
	b := browser(t)
	p := startServer(t, t.TempDir())
	ctx, cancel := chromedp.NewContext(b, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatal(err)
	}
	do(t, ctx, "open the server without a token",
		chromedp.Navigate("http://"+p.addr+"/"), chromedp.WaitVisible(chromedp.CSS(`#signin`)))
	screenshot(t, ctx, "00-signin")
	do(t, ctx, "paste the link's fragment", chromedp.Evaluate[chromedp.Void](`location.hash = 'token=`+p.token+`'`))
	waitJS(t, ctx, "the app starts", `document.querySelector('#conn-state').dataset.state === 'connected' && document.querySelector('#signin').hidden`)
}

// Presence crosses replicas and a killed replica's people disappear:
// two real replica processes on PostgreSQL and Redis.
func TestBrowserPresenceAcrossReplicas(t *testing.T) {
	b := browser(t)
	c := newCluster(t, clusterRedis(t), 2)
	a, z := c.replicas[0], c.replicas[1]
	sid := c.createSession(a)
	linkFor := func(p *serverProc, sub, name string) string {
		out, err := exec.Command(ensembleBinary(t), "token", "--data-dir", c.dataDir, "--addr", p.addr,
			"--sub", sub, "--name", name, "--role", "member", "--workspace", c.ws).Output()
		if err != nil {
			t.Fatalf("ensemble token: %v", err)
		}
		return strings.TrimSpace(string(out))
	}
	alice := person(t, b, linkFor(a, "alice", "Alice"))
	bob := person(t, b, linkFor(z, "bob", "Bob"))
	openSession(t, alice, "Alice", sid)
	openSession(t, bob, "Bob", sid)
	waitJS(t, alice, "Alice (replica A) sees Bob (replica B)", presenceIDs+` === 'alice,bob'`)
	waitJS(t, bob, "Bob sees Alice", presenceIDs+` === 'alice,bob'`)
	do(t, bob, "Bob types", chromedp.Click(chromedp.CSS(`#composer textarea`)), chromedp.KeyEvent("x"))
	waitJS(t, alice, "typing crosses replicas", `document.querySelector('#typing').textContent === 'Bob is typing…'`)
	screenshot(t, alice, "07-presence-two-replicas")

	z.kill() // no goodbye: its entries must expire
	<-z.done
	start := time.Now()
	waitJS(t, alice, "Bob disappears when his replica dies", presenceIDs+` === 'alice'`)
	t.Logf("a killed replica's watcher disappeared after %v", time.Since(start).Round(100*time.Millisecond))
}
