package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/ensemble-dev/ensemble/internal/testenv"
)

// browser starts headless Debian Chromium, or skips (fails when services
// are required) if it is not installed.
func browser(t *testing.T) context.Context {
	t.Helper()
	chromiumPath := testenv.ChromiumPath()
	if _, err := os.Stat(chromiumPath); err != nil {
		testenv.Missing(t, "Chromium (apt-get install -y chromium)", err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 800),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelBrowser(); cancelAlloc() })
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return bctx
}

// tab opens a new tab on the sign-in link and waits for the live connection.
func tab(t *testing.T, b context.Context, link string) context.Context {
	t.Helper()
	ctx, cancel := chromedp.NewContext(b)
	t.Cleanup(cancel)
	// The first run opens the tab and ties it to its context, so it must
	// not carry the per-step timeout.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("open a tab: %v", err)
	}
	do(t, ctx, "open the sign-in link",
		chromedp.Navigate(link),
		chromedp.WaitVisible(chromedp.CSS(`#conn-state[data-state="connected"]`)))
	url := get(t, ctx, "read the address bar", chromedp.Evaluate[string](`location.href`))
	if strings.Contains(url, "token=") {
		t.Fatalf("the token must be removed from the address bar, got %s", url)
	}
	return ctx
}

func do(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func get[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// The transcript as the browser tests read it: a turn's answer text, and
// the element of the latest turn (its status carries the phase and outcome).
const (
	answerTextJS = `(id) => Array.from(document.querySelectorAll(
		'#transcript [data-role="agent"][data-kind="text"][data-turn-id="' + id + '"] .msg-body'))
		.map(e => e.textContent).join("")`
	latestTurnJS = `() => {
		const all = document.querySelectorAll('#transcript [data-turn-id][data-phase]');
		return all[all.length - 1];
	}`
)

func agentTextIn(t *testing.T, ctx context.Context, turnID string) string {
	t.Helper()
	return get(t, ctx, "read the answer", chromedp.Evaluate[string](`(`+answerTextJS+`)(`+strconv.Quote(turnID)+`)`))
}

func latestTurn(t *testing.T, ctx context.Context) (id, phase, outcome string) {
	t.Helper()
	v := get(t, ctx, "read the latest turn", chromedp.Evaluate[[]string](`(() => {
		const e = (`+latestTurnJS+`)();
		return e ? [e.dataset.turnId, e.dataset.phase, e.dataset.outcome || ""] : ["", "", ""];
	})()`))
	return v[0], v[1], v[2]
}

// latestAnswer reads the latest turn's outcome and its answer text in one
// evaluation, so the two belong to the same painted frame.
func latestAnswer(t *testing.T, ctx context.Context) (id, outcome, text string) {
	t.Helper()
	v := get(t, ctx, "read the latest answer", chromedp.Evaluate[[]string](`(() => {
		const e = (`+latestTurnJS+`)();
		return e ? [e.dataset.turnId, e.dataset.outcome || "", (`+answerTextJS+`)(e.dataset.turnId)] : ["", "", ""];
	})()`))
	return v[0], v[1], v[2]
}

func waitOutcome(t *testing.T, ctx context.Context, tabName, outcome string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		id, _, got := latestTurn(t, ctx)
		if got == outcome {
			return id
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the latest turn never reached %q (now %q)", tabName, outcome, got)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Two tabs on one session: one creates it and sends a prompt, both watch
// the answer stream in live, and a stop from one tab cancels for both.
func TestBrowserTwoTabsStreamAndCancel(t *testing.T) {
	b := browser(t)
	p := startServer(t, t.TempDir())
	one := tab(t, b, p.link)
	two := tab(t, b, p.link)

	do(t, one, "create a session",
		chromedp.Click(chromedp.CSS(`#new-session`)),
		chromedp.WaitVisible(chromedp.CSS(`#session-list [data-session-id]`)))
	attr := get(t, one, "read the session id",
		chromedp.AttributeValue(chromedp.CSS(`#session-list [data-session-id]`), "data-session-id"))
	sessionID := attr.Value
	if !attr.Exists || sessionID == "" {
		t.Fatal("the new session is not in the list")
	}
	sel := `#session-list [data-session-id="` + sessionID + `"]`
	do(t, two, "open the same session in the second tab",
		chromedp.WaitVisible(chromedp.CSS(sel)), chromedp.Click(chromedp.CSS(sel)))

	// The second tab paints late, as a busy or background tab does: its
	// animation frames come 250 ms apart. The status that ends a turn must
	// still never show before the content it ends.
	do(t, two, "slow the second tab's animation frames",
		chromedp.Evaluate[chromedp.Void](`(() => { window.requestAnimationFrame = (cb) => setTimeout(() => cb(performance.now()), 250); })()`))

	do(t, one, "send a prompt",
		chromedp.SendKeys(chromedp.CSS(`#composer textarea`), "/sim words=80 rate=25ms"),
		chromedp.Click(chromedp.CSS(`#send`)))

	// The second tab sees the answer grow while it streams.
	lengths := map[int]bool{}
	var turnID string
	deadline := time.Now().Add(30 * time.Second)
	for {
		id, outcome, text := latestAnswer(t, two)
		if id != "" {
			turnID = id
			if len(text) > 0 {
				lengths[len(text)] = true
			}
		}
		if outcome == "completed" {
			if words := len(strings.Fields(text)); words < 80 {
				t.Fatalf("the second tab shows the turn completed over a partial answer (%d words): %q", words, text)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the second tab never saw the turn complete (outcome %q)", outcome)
		}
		time.Sleep(40 * time.Millisecond)
	}
	if len(lengths) < 3 {
		t.Fatalf("the second tab saw %d distinct answer lengths; the answer must stream in live", len(lengths))
	}
	waitOutcome(t, one, "first tab", "completed")
	a, b2 := agentTextIn(t, one, turnID), agentTextIn(t, two, turnID)
	if words := len(strings.Fields(a)); words < 80 || a != b2 {
		t.Fatalf("both tabs must show the same complete answer (%d words):\n%q\n%q", words, a, b2)
	}

	// A long answer started in the second tab is stopped from the first.
	do(t, two, "send a hanging prompt",
		chromedp.SendKeys(chromedp.CSS(`#composer textarea`), "/sim hang"),
		chromedp.Click(chromedp.CSS(`#send`)))
	do(t, one, "stop it from the other tab",
		chromedp.WaitVisible(chromedp.CSS(`#stop`)), chromedp.Click(chromedp.CSS(`#stop`)))
	waitOutcome(t, one, "first tab", "canceled")
	waitOutcome(t, two, "second tab", "canceled")

	if dir := os.Getenv("ENSEMBLE_SCREENSHOT_DIR"); dir != "" {
		png := get(t, two, "screenshot", chromedp.FullScreenshot(100))
		_ = os.WriteFile(filepath.Join(dir, "two-tabs.png"), png, 0o644)
	}
}
