package main

import (
	"context"
	"testing"

	"github.com/chromedp/chromedp"
)

// goalBarText is what the goal bar says (objective, status, revision,
// budget, who), the same for everyone watching.
const goalBarText = `[...document.querySelectorAll('#goal-bar .goal-row > span:not([hidden])')].map(e => e.textContent).join(' | ')`

// One member sets a goal, another pauses it; both (and a viewer) see the
// same goal bar, live, and goal turns are marked in the transcript.
func TestBrowserGoalSetPauseSharedBar(t *testing.T) {
	b := browser(t)
	dataDir := t.TempDir()
	p := startServer(t, dataDir, "--sim-rate", "5ms")
	alice := person(t, b, mintLink(t, dataDir, p.addr, "alice", "Alice", "member"))
	bob := person(t, b, mintLink(t, dataDir, p.addr, "bob", "Bob", "member"))
	carol := person(t, b, mintLink(t, dataDir, p.addr, "carol", "Carol", "viewer"))

	do(t, alice, "create a session", chromedp.Click(chromedp.CSS(`#new-session`)),
		chromedp.WaitVisible(chromedp.CSS(`#session-list [data-session-id]`)))
	sid := js[string](t, alice, "session id", `document.querySelector('#session-list [data-session-id]').dataset.sessionId`)
	openSession(t, alice, "Alice", sid)
	openSession(t, bob, "Bob", sid)
	openSession(t, carol, "Carol", sid)
	for name, ctx := range map[string]context.Context{"Alice": alice, "Bob": bob, "Carol": carol} {
		waitJS(t, ctx, name+" sees an empty goal bar", `!document.querySelector('#goal-bar').hidden && document.querySelector('#goal-bar').dataset.status === 'none'`)
	}
	if js[bool](t, carol, "viewer controls", `!document.querySelector('#goal-bar .goal-set').hidden`) {
		t.Fatalf("a viewer is offered to set a goal")
	}

	// Alice sets the goal: turn 1 reports "continue", turn 2 works on.
	do(t, alice, "Alice opens the goal form", chromedp.Click(chromedp.CSS(`#goal-bar .goal-set`)),
		chromedp.WaitVisible(chromedp.CSS(`#goal-bar .goal-input`)),
		chromedp.Evaluate[chromedp.Void](`(() => {
			document.querySelector('#goal-bar .goal-input').value = '/sim goal-after=9 goal-hang-from=2\nPolish the README until it reads well';
			document.querySelector('#goal-bar .goal-turns').value = '5';
		})()`),
		chromedp.Click(chromedp.CSS(`#goal-bar .goal-save`)))
	for name, ctx := range map[string]context.Context{"Alice": alice, "Bob": bob, "Carol": carol} {
		waitJS(t, ctx, name+" sees the goal active after one goal turn",
			`document.querySelector('#goal-bar').dataset.status === 'active' && document.querySelector('#goal-bar .goal-meta').textContent === 'rev 1 · 1 of 5 turns'`)
		waitJS(t, ctx, name+" sees the goal turns marked", `[...document.querySelectorAll('.badge-goal:not([hidden])')].map(e => e.textContent).join(',') === 'goal turn 1 · armed,goal turn 2'`)
	}
	if got := js[string](t, bob, "Bob's bar", goalBarText); got != "Goal | Polish the README until it reads well | active | rev 1 · 1 of 5 turns | set by Alice" {
		t.Fatalf("Bob's goal bar: %q", got)
	}
	// The session list shows it too, live, to everyone (workspace topic).
	for name, ctx := range map[string]context.Context{"Alice": alice, "Bob": bob, "Carol": carol} {
		waitJS(t, ctx, name+" sees the goal badge in the session list", sidebarGoal(sid)+` === 'goal|active|Goal (active): /sim goal-after=9 goal-hang-from=2\nPolish the README until it reads well'`)
	}
	screenshot(t, alice, "08-goal-active")

	// Bob pauses it: the running goal turn stops, everyone sees who paused.
	do(t, bob, "Bob pauses the goal", chromedp.Click(chromedp.CSS(`#goal-bar .goal-pause`)))
	want := "Goal | Polish the README until it reads well | paused | rev 2 · 1 of 5 turns | paused by Bob"
	for name, ctx := range map[string]context.Context{"Alice": alice, "Bob": bob, "Carol": carol} {
		waitJS(t, ctx, name+" sees the goal paused by Bob", goalBarText+` === `+jsString(want))
	}
	if !js[bool](t, alice, "Alice may resume", `!document.querySelector('#goal-bar .goal-resume').hidden && document.querySelector('#goal-bar .goal-pause').hidden`) {
		t.Fatalf("Alice is not offered to resume")
	}
	if js[bool](t, carol, "viewer controls", `[...document.querySelectorAll('#goal-bar button')].some(b => b.getClientRects().length > 0)`) {
		t.Fatalf("the viewer is offered goal controls")
	}
	waitJS(t, alice, "the fenced goal turn ended", `!document.querySelector('#session-live') || document.querySelector('#session-live').hidden`)
	waitJS(t, alice, "Alice sees who stopped the goal turn", `document.querySelector('#transcript').innerText.includes('Stopped by Bob (goal paused)')`)
	for name, ctx := range map[string]context.Context{"Alice": alice, "Bob": bob, "Carol": carol} {
		waitJS(t, ctx, name+" sees the paused badge in the session list", sidebarGoal(sid)+`.startsWith('goal paused|paused|')`)
	}
	screenshot(t, bob, "09-goal-paused-by-bob")
	screenshot(t, alice, "10-goal-paused-seen-by-alice")
	screenshot(t, carol, "11-goal-viewer")
}

// sidebarGoal is the session list row's goal badge as "text|status|title"
// ("" when hidden).
func sidebarGoal(sid string) string {
	return `(() => { const b = document.querySelector('#session-list [data-session-id="` + sid + `"] .session-goal');
		return !b || b.hidden ? '' : [b.textContent, b.dataset.status, b.title].join('|'); })()`
}

func jsString(s string) string {
	b := []byte{'\''}
	for _, r := range s {
		switch r {
		case '\'', '\\':
			b = append(b, '\\', byte(r))
		default:
			b = append(b, string(r)...)
		}
	}
	return string(append(b, '\''))
}
